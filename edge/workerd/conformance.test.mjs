// The conformance scenarios (edge/conformance/scenarios.json) against the real Worker bundle in
// workerd: Miniflare with in-memory KV and a real subscriber on 127.0.0.1.
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  buildRequest, check, clearKV, loadSuite, startSubscriber, startWorker, subscriberValue, suiteVars, unreachableURL,
} from "./lib.mjs";

const suite = loadSuite();
// Scenario name → "pass" | "fail", written for the cross-runtime check when make asks for it.
const results = Object.fromEntries(suite.scenarios.map((sc) => [sc.name, "fail"]));

describe("conformance scenarios in workerd", () => {
  let mf, sub, down, subs, dedup;
  before(async () => {
    sub = await startSubscriber();
    down = await unreachableURL();
    mf = startWorker(suiteVars(suite));
    await mf.ready;
    subs = await mf.getKVNamespace("SUBSCRIBERS");
    dedup = await mf.getKVNamespace("DEDUP");
  });
  after(async () => {
    await mf?.dispose();
    await sub?.close();
    const dir = process.env.EDGEHOOK_CONFORMANCE_DIR;
    if (dir) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, "workerd.json"), JSON.stringify({ runtime: "workerd", results }, null, 2) + "\n");
    }
  });

  for (const sc of suite.scenarios) {
    test(sc.name, async () => {
      await clearKV(subs);
      await clearKV(dedup);
      const startedMs = Date.now();
      for (const [id, seed] of Object.entries(sc.subscribers ?? {})) {
        await subs.put(`sub:${id}`, subscriberValue(seed, sub.url, down));
      }
      for (const kv of sc.dedup ?? []) {
        await dedup.put(kv.key, kv.now_offset_ms != null ? String(Date.now() + kv.now_offset_ms) : kv.value);
      }
      const failures = [];
      for (const [i, st] of sc.steps.entries()) {
        const now = Date.now();
        const b = buildRequest(suite, st.request, now);
        sub.setScript(st.upstream);
        const res = await mf.dispatchFetch("http://edge.test/", {
          method: b.method,
          headers: b.headers,
          body: b.method === "GET" || b.method === "HEAD" ? undefined : b.body,
        });
        const body = Buffer.from(await res.arrayBuffer());
        const errs = await check(st.expect, {
          status: res.status, headers: res.headers, body, received: sub.received, sentBody: b.body, writtenAtMs: now, dedup,
          clockSlackMs: Date.now() - startedMs,
        });
        if (errs.length) failures.push(`step ${i + 1} (${body.toString().trim()}):\n  ${errs.join("\n  ")}`);
      }
      assert.deepEqual(failures, []);
      results[sc.name] = "pass";
    });
  }
});
