// The Worker's entry module: a loader around the files `go tool workers-assets-gen` generates
// (wasm_exec.js, runtime.mjs), copied next to them as index.mjs by `make worker`.
//
// The generated worker.mjs starts a new Go instance for every request, because the library's
// Serve returns after one. Ours starts one instance per isolate: main() installs binding.serve,
// calls Ready and then blocks forever, and every request goes to that instance. If the instance
// ever exits, the request in it is answered 500 and the next request starts a new one.
//
// Every crossing between JS and Go costs (a Go js.Value carries a finalizer), so the loader does
// the marshalling in bulk: headers travel as one "name\nvalue\n…" string (a header value cannot
// hold a newline), bodies as one Uint8Array, and the small `io` object below gives Go one call for
// a request's KV reads, one per KV write and one per subscriber fetch. All decisions stay in Go
// (edge/relay).
import "./wasm_exec.js";
import { createRuntimeContext, loadModule } from "./runtime.mjs";

// The library's Go code calls globalThis.tryCatch.
globalThis.tryCatch = (fn) => {
  try {
    return { result: fn() };
  } catch (e) {
    return { error: e };
  }
};

const headerText = (headers) => [...headers].flat().join("\n");

function parseHeaders(text) {
  const h = new Headers();
  const parts = text === "" ? [] : text.split("\n");
  for (let i = 0; i + 1 < parts.length; i += 2) h.set(parts[i], parts[i + 1]);
  return h;
}

// Reads at most max bytes of a response body: in one go when the declared length fits, else from
// the stream, cancelling the rest.
async function excerpt(res, max) {
  if (res.body === null) return null;
  const declared = Number(res.headers.get("content-length") ?? NaN);
  if (declared <= max) return new Uint8Array(await res.arrayBuffer());
  const reader = res.body.getReader();
  const chunks = [];
  let n = 0;
  while (n < max) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    n += value.byteLength;
  }
  if (n >= max) reader.cancel().catch(() => {}); // the rest is not wanted
  const out = new Uint8Array(Math.min(n, max));
  let off = 0;
  for (const c of chunks) {
    out.set(c.subarray(0, out.length - off), off);
    off += Math.min(c.byteLength, out.length - off);
    if (off === out.length) break;
  }
  return out;
}

// Reports p's outcome to the Go side, which waits for it under id.
function settleWith(id, p) {
  p.then(
    (v) => io.settle(id, true, v),
    (e) => io.settle(id, false, String(e?.message ?? e)),
  );
}

// A KV read's result for getAll: [0, value], [1, null] for a missing key, [2, message].
const readResult = (p) =>
  p.then(
    (v) => (v === null ? [1, null] : [0, v]),
    (e) => [2, String(e?.message ?? e)],
  );

// The Go side's I/O primitives (edge/cmd/worker/js.go): each takes the id Go waits under and
// settles it once, whatever number of promises it involves.
const io = {
  settle: undefined, // installed by Go: settle(id, ok, value)
  // Reads (namespace, key) pairs at once; settles [code, value, code, value, …] in their order.
  getAll(id, ...nsKeys) {
    const reads = [];
    for (let i = 0; i + 1 < nsKeys.length; i += 2) reads.push(readResult(nsKeys[i].get(nsKeys[i + 1])));
    settleWith(id, Promise.all(reads).then((rs) => rs.flat()));
  },
  put(id, ns, key, value, ttlSeconds) {
    settleWith(id, ns.put(key, value, { expirationTtl: ttlSeconds }));
  },
  // One POST to a subscriber, aborted (connection and all) after timeoutMs; settles
  // [status, headerText, body excerpt, its length] or [-1, "", null, 0] on timeout; fails when
  // unreachable.
  post(id, url, headers, body, timeoutMs, maxBytes) {
    settleWith(id, post(url, headers, body, timeoutMs, maxBytes));
  },
};

async function post(url, headers, body, timeoutMs, maxBytes) {
  const abort = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, timeoutMs);
  try {
    // redirect: manual — the destination comes only from the subscriber's record.
    const res = await fetch(url, { method: "POST", headers: parseHeaders(headers), body, redirect: "manual", signal: abort.signal });
    const out = await excerpt(res, maxBytes);
    return [res.status, headerText(res.headers), out, out?.length ?? 0];
  } catch (e) {
    if (timedOut) return [-1, "", null, 0];
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

let instance; // Promise of the live instance: { serve, exited }

function start(env, ctx) {
  const started = (async () => {
    const mod = await loadModule();
    const go = new Go();
    const binding = { io };
    let ready;
    const isReady = new Promise((resolve) => (ready = resolve));
    const wasm = new WebAssembly.Instance(mod, {
      ...go.importObject,
      workers: { ready: () => ready() },
    });
    // env is the same for every request of an isolate; ctx belongs to this first request, and the
    // Go side never uses it (no waitUntil), so later requests do not depend on it.
    const exited = go.run(wasm, createRuntimeContext({ env, ctx, binding })).then(
      () => "the Go instance exited",
      (e) => `the Go instance failed: ${e}`,
    );
    exited.then(() => {
      if (instance === started) instance = undefined; // the next request starts a new one
    });
    const early = await Promise.race([isReady.then(() => null), exited]);
    if (early) throw new Error(early);
    return { serve: binding.serve, exited };
  })();
  started.catch(() => {
    if (instance === started) instance = undefined; // the next request tries again
  });
  return started;
}

const NULL_BODY_STATUS = new Set([101, 204, 205, 304]);

async function handle(req, serve) {
  const body = req.body === null ? null : new Uint8Array(await req.arrayBuffer()); // null: no body
  const [status, headers, out] = await new Promise((done) =>
    serve(req.method, headerText(req.headers), body, body?.length ?? 0, (...answer) => done(answer)),
  );
  return new Response(NULL_BODY_STATUS.has(status) ? null : out, { status, headers: parseHeaders(headers) });
}

export default {
  async fetch(req, env, ctx) {
    instance ??= start(env, ctx);
    const { serve, exited } = await instance;
    // If the instance dies while this request is in it, answer instead of hanging.
    return Promise.race([
      handle(req, serve),
      exited.then(
        (why) =>
          new Response(`rejected:edge_crashed: ${why}\n`, {
            status: 500,
            headers: { "Edgehook-Outcome": "rejected:edge_crashed", "Content-Type": "text/plain; charset=utf-8" },
          }),
      ),
    ]);
  },
};
