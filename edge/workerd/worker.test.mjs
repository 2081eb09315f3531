// The Worker bundle's own behaviour in workerd, beyond the shared scenarios: a KV bulk file made by
// the Go encoder and loaded by the real `wrangler kv bulk put`; concurrent requests on the one
// long-lived Go instance; a client that goes away mid-forward; bodies far larger than the JS/Go
// crossing's buffers; failing KV; a missing secret; a panic in the Go instance; the isolate's heap
// over many requests; a subscriber body that breaks off or stalls.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, beforeEach, describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { promisify } from "node:util";
import { Miniflare } from "miniflare";
// ws: miniflare's own WebSocket client, pinned with it in package-lock.json (Node 20 has no
// WebSocket without a flag); for workerd's inspector.
import WebSocket from "ws";
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

test("a client that goes away mid-forward: the forward still ends, its dedup mark is written, a retry is a duplicate", { timeout: 60_000 }, async () => {
  // The subscriber holds its answer until told, and notes whether the edge cut the forward's
  // connection before that (what Workers does to a request's work not covered by ctx.waitUntil).
  let arrived, release;
  const forwarded = new Promise((resolve) => (arrived = resolve));
  let cut, received = 0;
  const edgeCut = new Promise((resolve) => (cut = resolve));
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received++;
      res.on("close", () => res.writableFinished || cut());
      release = () => res.end("ok");
      arrived();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const mf = startWorker(suiteVars(suite));
  try {
    const subs = await mf.getKVNamespace("SUBSCRIBERS");
    const url = `http://127.0.0.1:${server.address().port}/hooks/cut`;
    await subs.put("sub:sub_cut", JSON.stringify({ url, timeout_ms: 30_000, active: true }));

    // The client resets its connection (RST) once the forward is at the subscriber. A plain close
    // (FIN), which is what aborting a fetch or http request sends, is not noticed by workerd until
    // it writes the answer (its HTTP server watches the socket for hang-up or error only), so the
    // request would not be cancelled and this test could not fail; a reset is noticed at once.
    const req = signed("del_cut_1", "sub_cut");
    const client = http.request(await mf.ready, { method: "POST", headers: { ...req.headers, "content-length": req.body.length } });
    const clientGone = new Promise((resolve) => client.on("error", resolve));
    client.end(req.body);
    await forwarded;
    client.socket.resetAndDestroy();
    assert.equal((await clientGone).code, "ECONNRESET");
    // A cancellation shows as the edge closing the forward's connection, here within a millisecond
    // of the reset; the subscriber waits a second for it before answering.
    const cancelled = await Promise.race([edgeCut.then(() => true), delay(1000).then(() => false)]);
    release();

    const dedup = await mf.getKVNamespace("DEDUP");
    let mark = null;
    for (let i = 0; i < 100 && mark === null; i++) {
      mark = await dedup.get("d:del_cut_1");
      if (mark === null) await delay(50);
    }
    assert.match(String(mark), /^\d+$/, `dedup mark after the client left (the edge cut the forward: ${cancelled})`);
    assert.equal(cancelled, false, "the edge cut the forward when the client left");

    // The origin's retry is answered from the mark and not forwarded again.
    const again = await mf.dispatchFetch("http://edge.test/", signed("del_cut_1", "sub_cut"));
    assert.deepEqual([again.status, again.headers.get("edgehook-outcome")], [200, "duplicate"], await again.text());
    assert.equal(received, 1);
  } finally {
    await mf.dispose();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

// SUBSCRIBERS and DEDUP for the next tests: wrapped bindings (same isolate, plain JS calls) over
// real KV namespaces that fail as the key asks: a delivery (or subscriber) id holding "getfail"
// makes its read reject, "getthrow" makes it throw at once, "getstall" makes it answer only after a
// minute, "putfail" makes its write reject, "putstall" makes it answer only after a minute. (A
// stall is a pending timer: a promise that can never settle, workerd cancels as a hung Worker.)
const failingKV = `export default function (env) {
  const inner = env.INNER;
  return {
    get(key) {
      if (key.includes("getthrow")) throw new Error("kv broken (thrown)");
      if (key.includes("getfail")) return Promise.reject(new Error("kv down (rejected)"));
      if (key.includes("getstall")) return new Promise((r) => setTimeout(() => r(inner.get(key)), 60_000));
      return inner.get(key);
    },
    put(key, value, opts) {
      if (key.includes("putfail")) return Promise.reject(new Error("kv full (rejected)"));
      if (key.includes("putstall")) return new Promise((r) => setTimeout(() => r(inner.put(key, value, opts)), 60_000));
      return inner.put(key, value, opts);
    },
  };
}`;

describe("large bodies and failing KV", () => {
  const maxBody = 1 << 20;
  let mf, sub;
  before(async () => {
    sub = await startSubscriber();
    mf = new Miniflare({
      workers: [
        {
          ...bundleOptions(),
          name: "edgehook-edge",
          wrappedBindings: { SUBSCRIBERS: "failing-subs", DEDUP: "failing-kv" },
          bindings: { ...suiteVars(suite), MAX_BODY_BYTES: String(maxBody) },
          cf: false,
        },
        { name: "failing-subs", modules: true, script: failingKV, kvNamespaces: { INNER: "subscribers" } },
        { name: "failing-kv", modules: true, script: failingKV, kvNamespaces: { INNER: "dedup" } },
      ],
      handleRuntimeStdio: quiet,
    });
    const subs = await mf.getKVNamespace("INNER", "failing-subs");
    await subs.put("sub:sub_big", JSON.stringify({ url: `${sub.url}/hooks/big`, timeout_ms: 20_000, active: true }));
  });
  after(async () => {
    await mf?.dispose();
    await sub?.close();
  });
  beforeEach(() => sub.setScript({ status: 200 }));

  const sha = (b) => createHash("sha256").update(b).digest("hex");

  test("256 KiB bodies, several at once, reach the subscriber byte for byte", async () => {
    const sent = Array.from({ length: 6 }, (_, i) => ({ id: `del_big_${i}`, body: randomBytes(256 * 1024) }));
    const answers = await Promise.all(sent.map(async ({ id, body }) => {
      const res = await mf.dispatchFetch("http://edge.test/", signed(id, "sub_big", { "content-type": "application/octet-stream" }, body));
      return [id, res.status, res.headers.get("edgehook-outcome"), await res.text()];
    }));
    for (const [id, status, outcome, text] of answers) assert.deepEqual([status, outcome], [200, "forwarded"], `${id}: ${text}`);
    const got = new Map(sub.received.map((r) => [r.headers["webhook-id"], r.body]));
    assert.equal(sub.received.length, sent.length);
    for (const { id, body } of sent) {
      assert.equal(got.get("evt_" + id)?.length, body.length, id);
      assert.equal(sha(got.get("evt_" + id)), sha(body), id);
    }
  });

  // A body of n bytes as a stream of 64 KiB chunks, sent chunked (no Content-Length). With open, the
  // stream does not end after its n bytes: it stays open until close() is called.
  function streamed(body, { open = false } = {}) {
    let off = 0;
    let controller;
    const stream = new ReadableStream({
      start(c) {
        controller = c;
      },
      pull(c) {
        if (off < body.length) {
          c.enqueue(new Uint8Array(body.subarray(off, off + 64 * 1024)));
          off += 64 * 1024;
        } else if (!open) c.close();
      },
    });
    return { stream, close: () => controller.close() };
  }
  const answerOf = async (res) => ({ status: res.status, headers: Object.fromEntries(res.headers), body: await res.text() });

  test("a body one byte over MAX_BODY_BYTES is refused", async () => {
    const req = signed("del_big_over", "sub_big", {}, randomBytes(maxBody + 1));
    assert.equal(req.headers["content-length"], undefined); // dispatchFetch declares the Buffer's length
    const got = await answerOf(await mf.dispatchFetch("http://edge.test/", req));
    assert.deepEqual([got.status, got.headers["edgehook-outcome"]], [413, "rejected:body_too_large"], got.body);
    assert.equal(got.body, `rejected:body_too_large: body is larger than MAX_BODY_BYTES=${maxBody} bytes\n`);
    assert.equal(sub.received.length, 0);
  });

  test("a body declared over MAX_BODY_BYTES is refused without being read", { timeout: 60_000 }, async () => {
    const body = randomBytes(maxBody + 1);
    const declared = await answerOf(await mf.dispatchFetch("http://edge.test/", signed("del_big_decl1", "sub_big", {}, body)));
    // Its first 64 KiB come, then nothing more until the answer: a loader that reads the body
    // before answering never answers (the test's timeout fails it).
    const { stream, close } = streamed(body.subarray(0, 64 * 1024), { open: true });
    const req = signed("del_big_decl2", "sub_big", { "content-length": String(body.length) }, body);
    try {
      const res = await mf.dispatchFetch("http://edge.test/", { ...req, body: stream, duplex: "half" });
      assert.deepEqual(await answerOf(res), declared);
    } finally {
      close();
    }
    assert.equal(declared.status, 413);
    // The relay's order stands: a wrong method is named before the body's size.
    const put = await mf.dispatchFetch("http://edge.test/", { ...signed("del_big_put", "sub_big", {}, body), method: "PUT" });
    assert.deepEqual([put.status, put.headers.get("edgehook-outcome")], [405, "rejected:method_not_allowed"], await put.text());
    assert.equal(sub.received.length, 0);
  });

  test("a chunked body over MAX_BODY_BYTES is refused as soon as the limit is passed, as a declared one is", { timeout: 60_000 }, async () => {
    const body = randomBytes(maxBody + 1);
    const declared = await answerOf(await mf.dispatchFetch("http://edge.test/", signed("del_big_decl", "sub_big", {}, body)));
    // The stream sends one byte over the limit and then neither ends nor sends more: a loader that
    // waits for the whole body never answers (the test's timeout fails it).
    const { stream, close } = streamed(body, { open: true });
    try {
      const res = await mf.dispatchFetch("http://edge.test/", { ...signed("del_big_stream", "sub_big", {}, body), body: stream, duplex: "half" });
      assert.deepEqual(await answerOf(res), declared);
    } finally {
      close();
    }
    assert.equal(declared.status, 413);
    assert.equal(sub.received.length, 0);
  });

  test("a body of exactly MAX_BODY_BYTES, declared or chunked, reaches the subscriber byte for byte", async () => {
    for (const [id, chunked] of [["del_big_at_decl", false], ["del_big_at_stream", true]]) {
      sub.setScript({ status: 200 });
      const body = randomBytes(maxBody);
      const req = signed(id, "sub_big", { "content-type": "application/octet-stream" }, body);
      if (chunked) Object.assign(req, { body: streamed(body).stream, duplex: "half" });
      const res = await mf.dispatchFetch("http://edge.test/", req);
      assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [200, "forwarded"], `${id}: ${await res.text()}`);
      assert.equal(sub.received.length, 1, id);
      assert.equal(sub.received[0].body.length, body.length, id);
      assert.equal(sha(sub.received[0].body), sha(body), id);
    }
  });

  // A throw fails the request's whole batch of reads (one io call), so any read may be named.
  for (const [name, id, read, message] of [
    ["rejects", "del_getfail_1", "d:del_getfail_1", "kv down (rejected)"],
    ["throws", "del_getthrow_1", "\\S+", "kv broken (thrown)"],
  ]) {
    test(`a DEDUP read that ${name} answers 503 rejected:kv_unavailable without forwarding`, async () => {
      const res = await mf.dispatchFetch("http://edge.test/", signed(id, "sub_big"));
      const text = await res.text();
      assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [503, "rejected:kv_unavailable"], text);
      assert.match(text, new RegExp(`read ${read}: .*${message.replace(/[()]/g, "\\$&")}`));
      assert.equal(sub.received.length, 0);
    });
  }

  // A KV that stalls: the request ends after edge/relay's KVTimeout (2 s) as if the KV had
  // failed, rather than wait for the origin's own timeout, which it counts against the subscriber.
  const KV_TIMEOUT_MS = 2000;
  async function timed(req) {
    const start = Date.now();
    const res = await Promise.race([mf.dispatchFetch("http://edge.test/", req), delay(10_000, null)]);
    assert.ok(res, "no answer within 10 s: the stalled KV call holds the request");
    const text = await res.text();
    return { res, text, ms: Date.now() - start };
  }
  for (const [name, id, subscriber, read] of [
    ["the subscriber's record", "del_subrec_1", "sub_getstall", "sub:sub_getstall"],
    ["the dedup mark", "del_getstall_1", "sub_big", "d:del_getstall_1"],
  ]) {
    test(`a read of ${name} that stalls is 503 rejected:kv_unavailable after the KV bound, without forwarding`, { timeout: 30_000 }, async () => {
      const { res, text, ms } = await timed(signed(id, subscriber));
      assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [503, "rejected:kv_unavailable"], text);
      assert.match(text, new RegExp(`read ${read}: KV did not answer within \\d+ ms`));
      assert.ok(ms >= KV_TIMEOUT_MS - 100 && ms < KV_TIMEOUT_MS + 2000, `answered after ${ms} ms`);
      assert.equal(sub.received.length, 0);
    });
  }

  test("a dedup write that stalls fails after the KV bound: the subscriber's answer, with Edgehook-Mark-Failed", { timeout: 30_000 }, async () => {
    const { res, text, ms } = await timed(signed("del_putstall_1", "sub_big"));
    assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [200, "forwarded"], text);
    assert.equal(res.headers.get("edgehook-mark-failed"), "dedup");
    assert.ok(ms >= KV_TIMEOUT_MS - 100 && ms < KV_TIMEOUT_MS + 2000, `answered after ${ms} ms`);
    assert.equal(sub.received.length, 1);
  });

  test("a failed dedup write keeps the subscriber's answer, says so in Edgehook-Mark-Failed; the Go instance serves on", async () => {
    const failed = await mf.dispatchFetch("http://edge.test/", signed("del_putfail_1", "sub_big"));
    assert.deepEqual([failed.status, failed.headers.get("edgehook-outcome")], [200, "forwarded"], await failed.text());
    assert.equal(failed.headers.get("edgehook-mark-failed"), "dedup"); // the origin is told
    const dedup = await mf.getKVNamespace("INNER", "failing-kv");
    assert.equal(await dedup.get("d:del_putfail_1"), null);
    // Every failure above (a throw included) left the instance able to serve and remember.
    const ok = await mf.dispatchFetch("http://edge.test/", signed("del_after_1", "sub_big"));
    assert.deepEqual([ok.status, ok.headers.get("edgehook-outcome")], [200, "forwarded"], await ok.text());
    assert.equal(ok.headers.get("edgehook-mark-failed"), null);
    assert.notEqual(await dedup.get("d:del_after_1"), null);
    assert.equal(sub.received.length, 2);
  });
});

test("a panic in the Go instance fails its request only: 500 rejected:edge_panic, and the instance serves on", async () => {
  // build/worker-panic is the bundle built with the edgehook_panic tag (make worker-panic): a
  // request with an edgehook-test-panic header panics in the Go instance before the relay runs.
  const sub = await startSubscriber();
  const mf = startWorker(suiteVars(suite), path.join(root, "build/worker-panic"));
  try {
    const subs = await mf.getKVNamespace("SUBSCRIBERS");
    await subs.put("sub:sub_panic", JSON.stringify({ url: `${sub.url}/hooks/panic`, timeout_ms: 5_000, active: true }));
    const ok = () => mf.dispatchFetch("http://edge.test/", signed("del_panic_ok_" + randomBytes(4).toString("hex"), "sub_panic"));
    const before = await ok();
    assert.deepEqual([before.status, before.headers.get("edgehook-outcome")], [200, "forwarded"], await before.text());
    for (const n of [1, 2]) {
      const res = await mf.dispatchFetch("http://edge.test/", signed(`del_panic_${n}`, "sub_panic", { "edgehook-test-panic": `try ${n}` }));
      const text = await res.text();
      assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [500, "rejected:edge_panic"], text);
      assert.match(text, new RegExp(`edge panic: asked by edgehook-test-panic: try ${n}`));
      const after = await ok();
      assert.deepEqual([after.status, after.headers.get("edgehook-outcome")], [200, "forwarded"], await after.text());
    }
    assert.equal(sub.received.length, 3, "the panicking requests reached nobody");
  } finally {
    await mf.dispose();
    await sub.close();
  }
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

test("a binding under a KV name that is not a KV namespace answers 500 rejected:misconfigured, naming it", async () => {
  // SUBSCRIBERS given as a var (in [vars] rather than kv_namespaces): every KV read failed, and the
  // Worker answered 503 rejected:kv_unavailable, which the origin waits out as a KV outage.
  const mf = new Miniflare({
    ...bundleOptions(),
    kvNamespaces: ["DEDUP"],
    bindings: { ...suiteVars(suite), SUBSCRIBERS: "00000000000000000000000000000001" },
    cf: false,
    handleRuntimeStdio: quiet,
  });
  try {
    const res = await mf.dispatchFetch("http://edge.test/", signed("del_cfg_kv", "sub_any"));
    const text = await res.text();
    assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [500, "rejected:misconfigured"], text);
    assert.match(text, /binding SUBSCRIBERS is a string, not a KV namespace/);
  } finally {
    await mf.dispose();
  }
});

// The Worker's bound on MAX_BODY_BYTES (edge/cmd/worker maxWorkerBody): what fits a 128 MB isolate.
const MAX_WORKER_BODY = 32 << 20;

test("a MAX_BODY_BYTES over the Worker's 32 MiB answers 500 rejected:misconfigured, naming it", async () => {
  const mf = startWorker({ ...suiteVars(suite), MAX_BODY_BYTES: String(MAX_WORKER_BODY + 1) });
  try {
    const res = await mf.dispatchFetch("http://edge.test/", signed("del_cfg_body", "sub_any"));
    const text = await res.text();
    assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [500, "rejected:misconfigured"], text);
    assert.match(text, new RegExp(`MAX_BODY_BYTES: ${MAX_WORKER_BODY + 1} is over the Worker's limit of ${MAX_WORKER_BODY}`));
  } finally {
    await mf.dispose();
  }
});

test("at the Worker's largest MAX_BODY_BYTES, a body of a few MiB, declared or chunked, reaches the subscriber byte for byte", { timeout: 60_000 }, async () => {
  const sub = await startSubscriber();
  const mf = startWorker({ ...suiteVars(suite), MAX_BODY_BYTES: String(MAX_WORKER_BODY) });
  try {
    const kv = await mf.getKVNamespace("SUBSCRIBERS");
    await kv.put("sub:sub_mib", JSON.stringify({ url: `${sub.url}/hooks/mib`, timeout_ms: 30_000, active: true }));
    const body = randomBytes(6 << 20);
    const sha = (b) => createHash("sha256").update(b).digest("hex");
    for (const [id, chunked] of [["del_mib_decl", false], ["del_mib_stream", true]]) {
      sub.setScript({ status: 200 });
      // Declared: a Content-Length the Worker sees (dispatchFetch's own does not reach it).
      const declared = chunked ? {} : { "content-length": String(body.length) };
      const req = signed(id, "sub_mib", { "content-type": "application/octet-stream", ...declared }, body);
      if (chunked) {
        let off = 0;
        const stream = new ReadableStream({
          pull(c) {
            if (off >= body.length) return c.close();
            c.enqueue(new Uint8Array(body.subarray(off, off + 256 * 1024)));
            off += 256 * 1024;
          },
        });
        Object.assign(req, { body: stream, duplex: "half" });
      }
      const res = await mf.dispatchFetch("http://edge.test/", req);
      assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [200, "forwarded"], `${id}: ${await res.text()}`);
      assert.equal(sub.received.length, 1, id);
      assert.equal(sub.received[0].body.length, body.length, id);
      assert.equal(sha(sub.received[0].body), sha(body), id);
    }
  } finally {
    await mf.dispose();
    await sub.close();
  }
});

test("numeric vars (MAX_BODY_BYTES = 4096 in wrangler.toml, unquoted) are read as their numbers", async () => {
  const sub = await startSubscriber();
  const vars = suiteVars(suite);
  const mf = startWorker({ ...vars, TOLERANCE_SECONDS: 300, DEDUP_TTL_SECONDS: 3600, MAX_BODY_BYTES: 4096 });
  try {
    const kv = await mf.getKVNamespace("SUBSCRIBERS");
    await kv.put("sub:sub_num", JSON.stringify({ url: `${sub.url}/hooks/num`, timeout_ms: 2000, active: true }));
    const ok = await mf.dispatchFetch("http://edge.test/", signed("del_num_1", "sub_num", {}, "x".repeat(4096)));
    assert.deepEqual([ok.status, ok.headers.get("edgehook-outcome")], [200, "forwarded"], await ok.text());
    const big = await mf.dispatchFetch("http://edge.test/", signed("del_num_2", "sub_num", {}, "x".repeat(4097)));
    assert.deepEqual([big.status, big.headers.get("edgehook-outcome")], [413, "rejected:body_too_large"], await big.text());
    const dedup = await mf.getKVNamespace("DEDUP");
    const { keys } = await dedup.list({ prefix: "d:del_num_1" });
    assert.equal(keys.length, 1);
    assert.ok(Math.abs(keys[0].expiration - (Date.now() / 1000 + 3600)) < 60, `expiration ${keys[0].expiration}`);
  } finally {
    await mf.dispose();
    await sub.close();
  }
});

test("the loader keeps nothing of a request once it is answered: the isolate's heap does not grow with requests", { timeout: 120_000 }, async () => {
  // workerd's inspector (Miniflare's inspectorPort) gives the isolate's JS heap after a full GC.
  // It answers some commands by echoing them (takeHeapSnapshot), so only ids are matched.
  const port = await freePort();
  const sub = await startSubscriber();
  const mf = new Miniflare({
    ...bundleOptions(),
    name: "edgehook-edge",
    kvNamespaces: ["SUBSCRIBERS", "DEDUP"],
    bindings: suiteVars(suite),
    cf: false,
    handleRuntimeStdio: quiet,
    inspectorPort: port,
  });
  let inspector;
  try {
    const kv = await mf.getKVNamespace("SUBSCRIBERS");
    await kv.put("sub:sub_heap", JSON.stringify({ url: `${sub.url}/hooks/heap`, timeout_ms: 10_000, active: true }));
    let n = 0;
    const serve = async (count) => {
      await Promise.all(Array.from({ length: 4 }, async () => {
        for (let i = 0; i < count / 4; i++) {
          const res = await mf.dispatchFetch("http://edge.test/", signed(`del_heap_${++n}`, "sub_heap"));
          assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [200, "forwarded"], await res.text());
        }
      }));
    };
    await serve(200); // the instance started, its code compiled, the first GCs done
    inspector = await inspect(port, "edgehook-edge");
    const heap = async () => {
      // A heap snapshot starts with a full GC (workerd's inspector leaves
      // HeapProfiler.collectGarbage unanswered); the inspector handles messages in order.
      await inspector.send("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
      const u = await inspector.send("Runtime.getHeapUsage");
      return u.usedSize + u.embedderHeapUsedSize; // JS objects, and the C++ ones of workerd's API
    };
    const before = await heap();
    const requests = 2000;
    await serve(requests);
    const grown = (await heap()) - before;
    // A request's Response held for good (a Promise.race against the instance's end did that)
    // was some 730 bytes per request; without it, the heap grew some 32 bytes per request over
    // this run (compiled code and its feedback).
    assert.ok(grown < requests * 128, `the isolate's heap grew by ${grown} bytes over ${requests} requests`);
  } finally {
    inspector?.close();
    await mf.dispose();
    await sub.close();
  }
});

/** A port on 127.0.0.1 that was free a moment ago. */
async function freePort() {
  const s = http.createServer();
  await new Promise((resolve) => s.listen(0, "127.0.0.1", resolve));
  const { port } = s.address();
  await new Promise((resolve) => s.close(resolve));
  return port;
}

/** A DevTools protocol session with worker name's isolate through workerd's inspector. */
async function inspect(port, name) {
  const targets = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
  const target = targets.find((t) => t.id === `core:user:${name}`);
  assert.ok(target, `inspector targets: ${JSON.stringify(targets.map((t) => t.id))}`);
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  const waiting = new Map();
  let last = 0;
  ws.on("message", (data) => {
    const m = JSON.parse(data);
    const w = waiting.get(m.id);
    if (!w) return; // an event (a snapshot's chunks)
    waiting.delete(m.id);
    if (m.error) w.reject(new Error(`${w.method}: ${m.error.message}`));
    else w.resolve(m.result);
  });
  return {
    send: (method, params = {}) =>
      new Promise((resolve, reject) => {
        waiting.set(++last, { method, resolve, reject });
        ws.send(JSON.stringify({ id: last, method, params }));
      }),
    close: () => ws.close(),
  };
}

// relay.UpstreamResponse: the body excerpt holds "at most the first wire.MaxExcerptBytes bytes of the
// subscriber's body, fewer when it broke off or stalled past the timeout"; the harness
// (httpupstream) relays the bytes that did arrive, and so must the Worker. The loader once read a
// body declared within the excerpt's size with res.arrayBuffer(), which rejects whole when the
// body breaks off or the timeout aborts it, and the excerpt was dropped.
describe("a subscriber's body that breaks off or stalls", () => {
  let mf, sub;
  before(async () => {
    sub = await startSubscriber();
    mf = startWorker(suiteVars(suite));
    const subs = await mf.getKVNamespace("SUBSCRIBERS");
    await subs.put("sub:sub_cut", JSON.stringify({ url: `${sub.url}/hooks/cut`, timeout_ms: 1000, active: true }));
  });
  after(async () => {
    await mf?.dispose();
    await sub?.close();
  });

  for (const [name, script] of [
    ["breaks off", { status: 503, body: "busy: retry later", cut_body: true }],
    ["stalls past the timeout", { status: 503, body: "busy: retry later", stall_body: true }],
  ]) {
    test(`a body that ${name} still gives the excerpt of what arrived, as in the harness`, async () => {
      sub.setScript(script);
      const res = await mf.dispatchFetch("http://edge.test/", signed(`del_cut_${name.length}`, "sub_cut"));
      const text = await res.text();
      assert.deepEqual([res.status, res.headers.get("edgehook-outcome")], [503, "forwarded"], text);
      assert.equal(text, "busy: retry later");
    });
  }
});
