// Shared pieces of the workerd tests and benchmark: the real Worker bundle in Miniflare, the
// scripted subscriber on 127.0.0.1, the hop signature in JS (docs/PROTOCOL.md), and the
// conformance checks (the JS reading of edge/conformance/README.md).
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { Miniflare } from "miniflare";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const workerDir = path.join(root, "build/worker");

/** The scenario file, shared with the Go runners. */
export function loadSuite() {
  return JSON.parse(readFileSync(path.join(root, "edge/conformance/scenarios.json"), "utf8"));
}

/** compatibility_date from wrangler.toml, so the tests run what deploys. */
export function compatibilityDate() {
  const m = readFileSync(path.join(root, "wrangler.toml"), "utf8").match(/^compatibility_date\s*=\s*"([^"]+)"/m);
  if (!m) throw new Error("wrangler.toml: no compatibility_date");
  return m[1];
}

/** Miniflare options that load the real bundle (build/worker, from `make worker`), or the one in dir. */
export function bundleOptions(dir = workerDir) {
  return {
    scriptPath: path.join(dir, "index.mjs"),
    modulesRoot: dir,
    modules: true,
    modulesRules: [
      { type: "ESModule", include: ["**/*.mjs", "**/*.js"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: compatibilityDate(),
  };
}

/** Discards the Worker's console output (it logs each rejection, for `wrangler tail`). */
export function quiet(stdout, stderr) {
  stdout.resume();
  stderr.resume();
}

/** Starts the real bundle (or the one in dir) in workerd with in-memory KV and the given vars. */
export function startWorker(vars, dir = workerDir) {
  return new Miniflare({
    ...bundleOptions(dir),
    name: "edgehook-edge",
    kvNamespaces: ["SUBSCRIBERS", "DEDUP"],
    bindings: vars,
    cf: false,
    handleRuntimeStdio: quiet,
  });
}

/** The Worker's vars for the suite's edge config. */
export function suiteVars(suite) {
  const c = suite.config;
  return {
    EDGE_SECRET: c.secrets.map((n) => suite.secrets[n]).join(","),
    TOLERANCE_SECONDS: String(c.tolerance_seconds),
    DEDUP_TTL_SECONDS: String(c.dedup_ttl_seconds),
    MAX_BODY_BYTES: String(c.max_body_bytes),
  };
}

/** HMAC-SHA256 hop signature, "v1,<base64>" per secret (shared/signature/hop.go). */
export function signHop(secrets, hop, body) {
  const prefix = [
    "edgehook-hop-v1", hop.delivery_id, hop.subscriber_id, hop.event_type, hop.coalesce_key ?? "",
    String(hop.attempt), String(hop.timestamp), "",
  ].join("\n");
  return secrets
    .map((s) => {
      const key = Buffer.from(s.replace(/^whsec_/, ""), "base64");
      return "v1," + createHmac("sha256", key).update(prefix).update(body).digest("base64");
    })
    .join(" ");
}

/** Builds a step's request (scenario format) signed with the hop timestamp relative to now. */
export function buildRequest(suite, req, nowMs) {
  let body = req.body_bytes > 0 ? Buffer.alloc(req.body_bytes, "x") : Buffer.from(req.body ?? "");
  const hop = { ...req.hop, timestamp: Math.floor(nowMs / 1000) + (req.hop.timestamp_offset_seconds ?? 0) };
  const h = {};
  for (const [k, v] of Object.entries(req.headers ?? {})) h[k.toLowerCase()] = v;
  h["edgehook-delivery-id"] = hop.delivery_id;
  h["edgehook-subscriber-id"] = hop.subscriber_id;
  h["edgehook-event-type"] = hop.event_type;
  if (hop.coalesce_key) h["edgehook-coalesce-key"] = hop.coalesce_key;
  h["edgehook-attempt"] = String(hop.attempt);
  h["edgehook-timestamp"] = String(hop.timestamp);
  h["edgehook-signature"] = signHop((req.sign_with ?? []).map((n) => suite.secrets[n]), hop, body);
  for (const k of req.omit_headers ?? []) delete h[k.toLowerCase()];
  for (const [k, v] of Object.entries(req.set_headers ?? {})) h[k.toLowerCase()] = v;
  if (req.send_body != null) body = Buffer.from(req.send_body);
  return { method: req.method || "POST", headers: h, body };
}

/** A scripted answer's compression for each content_encoding ("deflate": the zlib format). */
const encoders = { gzip: gzipSync, br: brotliCompressSync, deflate: deflateSync };

/** The scripted subscriber: answers as the current step says and records what it receives. */
export async function startSubscriber() {
  const sub = { script: { status: 200 }, received: [], hanging: new Set() };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const u = sub.script;
      const plain = u.body_bytes > 0 ? Buffer.alloc(u.body_bytes, "y") : Buffer.from(u.body ?? "");
      const body = u.content_encoding ? encoders[u.content_encoding](plain) : plain;
      sub.received.push({ path: req.url, headers: req.headers, rawHeaders: req.rawHeaders, body: Buffer.concat(chunks), answer: body });
      if (u.hang) {
        // Answer only when the edge gives up (closes the connection) or the subscriber stops.
        sub.hanging.add(res);
        res.on("close", () => sub.hanging.delete(res));
        return;
      }
      const headers = { ...u.headers };
      if (u.header_bytes > 0) headers["X-Pad"] = "p".repeat(u.header_bytes);
      if (u.content_encoding) headers["Content-Encoding"] = u.content_encoding;
      if (u.cut_body || u.stall_body) {
        // Declares 100 bytes more than it sends, then closes the connection (the body breaks off)
        // or leaves it open until the edge gives up (the body stalls).
        res.writeHead(u.status, { ...headers, "content-length": String(body.length + 100) });
        if (u.cut_body) {
          res.write(body, () => res.socket.destroy());
          return;
        }
        res.write(body);
        sub.hanging.add(res);
        res.on("close", () => sub.hanging.delete(res));
        return;
      }
      res.writeHead(u.status, headers);
      res.end(body);
    });
  });
  server.keepAliveTimeout = 60_000; // longer than any run: no close racing a reused connection
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  sub.url = `http://127.0.0.1:${server.address().port}`;
  sub.setScript = (u) => {
    sub.script = u;
    sub.received = [];
  };
  sub.close = async () => {
    for (const res of sub.hanging) res.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return sub;
}

/** A base URL on 127.0.0.1 where nothing listens (a port just released). */
export async function unreachableURL() {
  const s = http.createServer();
  await new Promise((resolve) => s.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${s.address().port}`;
  await new Promise((resolve) => s.close(resolve));
  return url;
}

/** The KV value of a subscriber seed, with the URL placeholders replaced. */
export function subscriberValue(seed, subscriberURL, downURL) {
  if (seed.raw != null) return seed.raw;
  return JSON.stringify(seed.record).replaceAll("{{subscriber}}", subscriberURL).replaceAll("{{unreachable}}", downURL);
}

/** Deletes every key of a KV namespace. */
export async function clearKV(ns) {
  for (;;) {
    const { keys } = await ns.list();
    if (keys.length === 0) return;
    await Promise.all(keys.map((k) => ns.delete(k.name)));
  }
}

/** Reads a DEDUP key as the Go runner's KVView does: value and expiration (ms, 0 for none). */
export async function lookup(ns, key) {
  const value = await ns.get(key);
  if (value === null) return { found: false };
  const { keys } = await ns.list({ prefix: key });
  const k = keys.find((x) => x.name === key);
  return { found: true, value, expiresMs: k?.expiration ? k.expiration * 1000 : 0 };
}

/** Compares a step's observation with its expectation; returns every mismatch (conformance.Check). */
export async function check(e, o) {
  const errs = [];
  const hdr = (name) => o.headers.get(name);
  if (o.status !== e.status) errs.push(`status ${o.status}, want ${e.status}`);
  if (hdr("edgehook-outcome") !== e.outcome) errs.push(`outcome ${JSON.stringify(hdr("edgehook-outcome"))}, want ${JSON.stringify(e.outcome)}`);
  for (const [k, v] of Object.entries(e.headers ?? {})) {
    if (hdr(k) !== v && !retryAfterWithinSlack(k, hdr(k), v, o.clockSlackMs ?? 0)) {
      errs.push(`header ${k} = ${JSON.stringify(hdr(k))}, want ${JSON.stringify(v)}`);
    }
  }
  for (const k of e.headers_absent ?? []) {
    if (hdr(k) !== null) errs.push(`header ${k} = ${JSON.stringify(hdr(k))}, want absent`);
  }
  if (e.body != null && o.body.toString() !== e.body) errs.push(`body ${JSON.stringify(o.body.toString())}, want ${JSON.stringify(e.body)}`);
  if (e.body_length != null && o.body.length !== e.body_length) errs.push(`body length ${o.body.length}, want ${e.body_length}`);
  if (e.body_as_answered && !(o.received.length === 1 && o.body.equals(o.received[0].answer))) {
    errs.push(`body ${JSON.stringify(o.body.toString())}, want the subscriber's answer as sent`);
  }
  if (e.upstream_latency && !/^\d+$/.test(hdr("edgehook-upstream-latency-ms") ?? "")) {
    errs.push(`Edgehook-Upstream-Latency-Ms = ${JSON.stringify(hdr("edgehook-upstream-latency-ms"))}, want a non-negative integer`);
  }
  const n = o.received.length;
  if (e.forwarded && n !== 1) errs.push(`subscriber received ${n} requests, want 1`);
  else if (!e.forwarded && n !== 0) errs.push(`subscriber received ${n} requests, want none`);
  else if (e.forwarded && e.forwarded_request) errs.push(...checkForwarded(e.forwarded_request, o.received[0], o.sentBody));
  if (e.kv) errs.push(...(await checkKV(e.kv, o)));
  return errs;
}

/**
 * workerd runs on the real clock, so a Retry-After counting down a window set earlier in the
 * scenario may be lower than the expected value (written for a clock that stands still) by at most
 * the whole seconds that really passed since the scenario began; never higher, never absent.
 */
function retryAfterWithinSlack(name, got, want, slackMs) {
  if (name.toLowerCase() !== "retry-after" || got === null || !/^\d+$/.test(got) || !/^\d+$/.test(want)) return false;
  const g = Number(got), w = Number(want);
  return g <= w && g >= w - Math.ceil(slackMs / 1000);
}

function checkForwarded(e, r, sent) {
  const errs = [];
  if (e.path && r.path !== e.path) errs.push(`forwarded path ${r.path}, want ${e.path}`);
  const values = (name) => {
    const out = [];
    for (let i = 0; i < r.rawHeaders.length; i += 2) if (r.rawHeaders[i].toLowerCase() === name.toLowerCase()) out.push(r.rawHeaders[i + 1]);
    return out;
  };
  for (const [k, v] of Object.entries(e.headers ?? {})) {
    const got = values(k);
    if (got.length !== 1 || got[0] !== v) errs.push(`forwarded header ${k} = ${JSON.stringify(got)}, want ${JSON.stringify(v)}`);
  }
  for (const k of e.headers_absent ?? []) {
    if (values(k).length > 0) errs.push(`forwarded header ${k} = ${JSON.stringify(values(k))}, want absent`);
  }
  if (e.body_identical && !r.body.equals(sent)) errs.push(`forwarded body differs from the body sent (${r.body.length} vs ${sent.length} bytes)`);
  return errs;
}

async function checkKV(e, o) {
  const errs = [];
  for (const k of e.present ?? []) if (!(await lookup(o.dedup, k)).found) errs.push(`DEDUP ${k} missing`);
  for (const k of e.absent ?? []) {
    const l = await lookup(o.dedup, k);
    if (l.found) errs.push(`DEDUP ${k} = ${JSON.stringify(l.value)}, want absent`);
  }
  for (const [k, ttl] of Object.entries(e.ttl_seconds ?? {})) {
    const l = await lookup(o.dedup, k);
    const want = o.writtenAtMs + ttl * 1000;
    if (!l.found || Math.abs(l.expiresMs - want) > 2000) errs.push(`DEDUP ${k} expires ${l.expiresMs} (present ${l.found}), want ${want} ± 2s`);
  }
  for (const k of e.now_ms ?? []) {
    const l = await lookup(o.dedup, k);
    if (!l.found || !/^\d+$/.test(l.value) || Math.abs(Number(l.value) - o.writtenAtMs) > 5000) {
      errs.push(`DEDUP ${k} = ${JSON.stringify(l.value)}, want unix ms within 5s of ${o.writtenAtMs}`);
    }
  }
  return errs;
}
