// The Worker bundle's own behaviour in workerd, beyond the shared scenarios: a KV bulk file made by
// the Go encoder and loaded by the real `wrangler kv bulk put`; concurrent requests on the one
// long-lived Go instance; a missing secret.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { Miniflare } from "miniflare";
import { bundleOptions, buildRequest, loadSuite, quiet, root, startSubscriber, startWorker, suiteVars } from "./lib.mjs";

const run = promisify(execFile);
const suite = loadSuite();
const env = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

function signed(id, subscriberId, headers = {}, body = `{"n":"${id}"}`) {
  const b = buildRequest(suite, {
    hop: { delivery_id: id, subscriber_id: subscriberId, event_type: "video.trending", attempt: 1 },
    sign_with: ["current"],
    headers: { "content-type": "application/json", "webhook-id": "evt_" + id, ...headers },
    body,
  }, Date.now());
  return { method: "POST", headers: b.headers, body: b.body };
}

/** The KV namespace ids of wrangler.toml, by binding. */
async function wranglerKVIds() {
  const toml = (await import("node:fs")).readFileSync(path.join(root, "wrangler.toml"), "utf8");
  const ids = {};
  for (const m of toml.matchAll(/binding\s*=\s*"(\w+)"\s*\nid\s*=\s*"(\w+)"/g)) ids[m[1]] = m[2];
  return ids;
}

test("a KV bulk file from the Go encoder, loaded by wrangler kv bulk put, makes the Worker deliver", async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), "edgehook-kvbulk-"));
  const sub = await startSubscriber();
  let mf;
  try {
    const file = path.join(dir, "subscribers.json");
    await run(process.env.GO ?? "go", ["run", "./edge/workerd/kvbulk", "-out", file, "-id", "sub_bulk", "-url", `${sub.url}/hooks/bulk`], { cwd: root, env });
    await run("npx", ["--no-install", "wrangler", "kv", "bulk", "put", file, "--binding", "SUBSCRIBERS", "--local", "--persist-to", path.join(dir, "state")], { cwd: root, env });
    const ids = await wranglerKVIds();
    assert.ok(ids.SUBSCRIBERS && ids.DEDUP, `wrangler.toml KV ids: ${JSON.stringify(ids)}`);
    mf = new Miniflare({
      ...bundleOptions(),
      kvNamespaces: ids,
      kvPersist: path.join(dir, "state/v3/kv"),
      bindings: suiteVars(suite),
      cf: false,
      handleRuntimeStdio: quiet,
    });
    sub.setScript({ status: 204 });
    const res = await mf.dispatchFetch("http://edge.test/", signed("del_bulk_1", "sub_bulk"));
    assert.equal(res.status, 204, await res.text());
    assert.equal(res.headers.get("edgehook-outcome"), "forwarded");
    assert.equal(sub.received.length, 1);
    assert.equal(sub.received[0].path, "/hooks/bulk");
    assert.equal(sub.received[0].body.toString(), '{"n":"del_bulk_1"}');
    // A subscriber the file does not hold is still unknown.
    const other = await mf.dispatchFetch("http://edge.test/", signed("del_bulk_2", "sub_other"));
    assert.equal(other.status, 404);
    assert.equal(other.headers.get("edgehook-outcome"), "rejected:unknown_subscriber");
  } finally {
    await mf?.dispose();
    await sub.close();
    await rm(dir, { recursive: true, force: true });
  }
});

describe("one Go instance under concurrent requests", () => {
  let mf, server, url;
  before(async () => {
    // Answers after the delay the request asks for (x-delay-ms, a forwarded header), echoing its
    // webhook-id, or never (x-delay-ms: hang).
    server = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        if (req.headers["x-delay-ms"] === "hang") return;
        setTimeout(() => res.end(`echo ${req.headers["webhook-id"]}`), Number(req.headers["x-delay-ms"]));
      });
    });
    server.keepAliveTimeout = 60_000;
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${server.address().port}`;
    mf = startWorker(suiteVars(suite));
    const subs = await mf.getKVNamespace("SUBSCRIBERS");
    // Generous for the answering one (this machine is shared and slow); short for the hanging one.
    await subs.put("sub:sub_conc", JSON.stringify({ url: `${url}/hooks/conc`, timeout_ms: 10_000, active: true }));
    await subs.put("sub:sub_hang", JSON.stringify({ url: `${url}/hooks/hang`, timeout_ms: 300, active: true }));
  });
  after(async () => {
    await mf?.dispose();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve) ?? resolve());
  });

  test("every request gets its own answer; timeouts fire while others finish", async () => {
    for (let wave = 0; wave < 2; wave++) {
      const cases = Array.from({ length: 24 }, (_, i) => ({ id: `del_c${wave}_${i}`, delay: i % 6 === 5 ? "hang" : String((i * 37) % 250) }));
      const answers = await Promise.all(cases.map(async (c) => {
        const sid = c.delay === "hang" ? "sub_hang" : "sub_conc";
        const res = await mf.dispatchFetch("http://edge.test/", signed(c.id, sid, { "x-delay-ms": c.delay }));
        return { c, status: res.status, outcome: res.headers.get("edgehook-outcome"), body: await res.text() };
      }));
      for (const { c, status, outcome, body } of answers) {
        if (c.delay === "hang") {
          assert.deepEqual([status, outcome], [504, "upstream_timeout"], `${c.id}: ${body}`);
        } else {
          assert.deepEqual([status, outcome, body], [200, "forwarded", `echo evt_${c.id}`], c.id);
        }
      }
    }
  });
});

test("a Worker without EDGE_SECRET answers 500 rejected:misconfigured, naming it", async () => {
  const { EDGE_SECRET, ...vars } = suiteVars(suite);
  assert.ok(EDGE_SECRET);
  const mf = startWorker(vars);
  try {
    const res = await mf.dispatchFetch("http://edge.test/", signed("del_cfg_1", "sub_any"));
    assert.equal(res.status, 500);
    assert.equal(res.headers.get("edgehook-outcome"), "rejected:misconfigured");
    assert.match(await res.text(), /EDGE_SECRET/);
  } finally {
    await mf.dispose();
  }
});
