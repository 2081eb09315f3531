// The npm packages the deploy steps install (README: `npm ci`, then wrangler through npx), checked
// from package-lock.json: what `npm ci` does on a machine other than this one cannot be run here.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { root } from "./lib.mjs";

test("npm ci installs on any platform: every package bound to an os or cpu is optional", () => {
  // npm refuses to install a package whose "os" or "cpu" excludes the machine (EBADPLATFORM) and
  // fails the whole `npm ci` with it, unless the package is optional, which it then skips
  // (@npmcli/arborist, build-ideal-tree.js). A Node binary for linux-x64 as a plain dependency
  // stopped every deploy from a Mac or an arm64 machine at its first step.
  const lock = JSON.parse(readFileSync(path.join(root, "package-lock.json"), "utf8"));
  const bound = Object.entries(lock.packages).filter(([name, p]) => name !== "" && (p.os || p.cpu));
  assert.ok(bound.length > 0, "no platform-bound package at all: is this the lockfile?");
  const required = bound.filter(([, p]) => !p.optional).map(([name, p]) => `${name} (os ${p.os}, cpu ${p.cpu})`);
  assert.deepEqual(required, []);
});
