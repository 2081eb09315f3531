// The Worker's entry module: a loader around the files `go tool workers-assets-gen` generates
// (wasm_exec.js, runtime.mjs), copied next to them as index.mjs by `make worker`.
//
// The generated worker.mjs starts a new Go instance for every request, because the library's
// Serve returns after one. Ours starts one instance per isolate: main() sets up the handler,
// calls Ready and then blocks forever, and every request goes to that instance. If the instance
// ever exits, the request in it is answered 500 and the next request starts a new one.
//
// Every crossing between JS and Go costs, and a js.Value that refers to a JS string or object costs
// more (Go registers a finalizer for it, JS a map entry), so only numbers cross: Go passes the
// address and length of its own memory, where this loader reads what Go sends (strings, bodies)
// and writes what Go asks for (the request, each operation's result). The small `io` object below
// gives Go one call per operation — a request's KV reads, a KV write, a subscriber fetch — and
// each settles with one call back into Go. Headers travel as one "name\nvalue\n…" text (a header
// value cannot hold a newline). All decisions stay in Go (edge/relay).
import "./wasm_exec.js";
import { createRuntimeContext, loadModule } from "./runtime.mjs";
import { nextRequestId } from "./requestid.mjs";

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

// Reads at most max bytes of a response body (null: none).
async function excerpt(res, max) {
  return res.body === null ? null : readAtMost(res.body, max);
}

// Hands each chunk of reader to take while more() holds, until the stream ends or breaks off.
async function readChunks(reader, more, take) {
  while (more()) {
    let r;
    try {
      r = await reader.read();
    } catch {
      return;
    }
    if (r.done) return;
    take(r.value);
  }
}

// Reads a stream until it ends, breaks off (the connection, or the timeout's abort) or max bytes
// have arrived, then cancels the rest; returns at most max bytes, those that arrived. Not
// res.arrayBuffer(), even for a short declared length: it rejects whole when the body breaks off,
// and the subscriber's error text was lost (the harness relays what arrived).
async function readAtMost(stream, max) {
  const reader = stream.getReader();
  const chunks = [];
  let n = 0;
  await readChunks(reader, () => n < max, (c) => {
    chunks.push(c);
    n += c.byteLength;
  });
  if (n >= max) reader.cancel().catch(() => {}); // the rest is not wanted
  if (chunks.length === 1 && n <= max) return chunks[0];
  const out = new Uint8Array(Math.min(n, max));
  let off = 0;
  for (const c of chunks) {
    out.set(c.subarray(0, out.length - off), off);
    off += Math.min(c.byteLength, out.length - off);
    if (off === out.length) break;
  }
  return out;
}

// A request body as Go takes it (io.take): body, its bytes or null for none, and bodyLen, the
// length Go is told. Go needs at most cap bytes (edgehookBodyCap: its limit plus one, enough for
// the relay to answer 413), so a body is read only that far: anyone can send one, before any
// signature check, and a body read whole could exhaust the isolate's memory, failing every request
// in it. A body declared over the limit (cap bytes or more) is not read at all: Go is told cap bytes
// and gets none (it takes zeros), the relay needing only their count to refuse it, as it refuses
// one that was read. A body declared within it is read into one buffer of its length, each chunk
// dropped once copied: read as chunks and then joined, the isolate held it twice before Go's copy.
async function requestBody(req, cap) {
  if (req.body === null) return { body: null, bodyLen: 0 };
  const declared = Number(req.headers.get("content-length") ?? NaN);
  if (declared >= cap) {
    req.body.cancel().catch(() => {});
    return { body: new Uint8Array(0), bodyLen: cap };
  }
  const body = Number.isSafeInteger(declared) && declared >= 0 ? await readInto(req.body, declared) : await readAtMost(req.body, cap);
  return { body, bodyLen: body.length };
}

// Reads a stream of n bytes (a declared length) into one new buffer of n bytes; returns the bytes
// that arrived before it ended or broke off, at most n (the runtime refuses a body longer than
// its Content-Length).
async function readInto(stream, n) {
  const reader = stream.getReader();
  const out = new Uint8Array(n);
  let off = 0;
  await readChunks(reader, () => off < n, (chunk) => {
    const c = chunk.subarray(0, n - off);
    out.set(c, off);
    off += c.byteLength;
  });
  return off === n ? out : out.subarray(0, off);
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// The live Go instance: { exports, wake }. Go is entered through its exports edgehookServe and
// edgehookSettle (edge/cmd/worker/serve.go, js.go), each followed by a resumption of its scheduler
// (wake): cheaper than a js.FuncOf, which syscall/js delivers as an event object it reads by name.
let live;
let memory; // the live instance's memory; its buffer changes when it grows, so each use asks
let env; // the isolate's env: the KV namespaces, by binding name

const bytesAt = (ptr, len) => new Uint8Array(memory.buffer, ptr, len);
const stringAt = (ptr, len) => decoder.decode(bytesAt(ptr, len));

// Go's packed lists (edge/cmd/worker/js.go): each item a little-endian uint32 length, then its
// bytes; 0xffffffff is null, with no bytes.
const NULL_ITEM = 0xffffffff;

function unpack(ptr, len) {
  const b = bytesAt(ptr, len);
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const items = [];
  for (let off = 0; off < len; ) {
    const n = view.getUint32(off, true);
    off += 4;
    items.push(n === NULL_ITEM ? null : decoder.decode(b.subarray(off, off + n)));
    if (n !== NULL_ITEM) off += n;
  }
  return items;
}

function pack(items) {
  const parts = items.map((x) => (typeof x === "string" ? encoder.encode(x) : x));
  let size = 0;
  for (const p of parts) size += 4 + (p?.length ?? 0);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  let off = 0;
  for (const p of parts) {
    view.setUint32(off, p === null ? NULL_ITEM : p.length, true);
    off += 4;
    if (p !== null) {
      out.set(p, off);
      off += p.length;
    }
  }
  return out;
}

const results = new Map(); // operation id → its packed result, until Go copies it (io.result)

// Starts an operation and reports its outcome to the Go side, which waits for it under id: start()
// runs now (Go's memory is read while Go waits in the call) and returns a promise of a list of
// items (strings, byte arrays, nulls); a failure, or a throw of start itself, gives its message.
// A throw must not reach Go: syscall/js would panic there, leaving the operation's entry behind.
// An outcome that arrives after its Go instance ended is dropped: ids are per instance.
function settleWith(id, start) {
  const go = live;
  let p;
  try {
    p = Promise.resolve(start());
  } catch (e) {
    p = Promise.reject(e);
  }
  const settle = (ok, items) => {
    if (live !== go) return;
    const packed = pack(items);
    if (packed.length > 0) results.set(id, packed); // Go asks for no empty result (io.result)
    go.wake(go.exports.edgehookSettle, id, ok ? 1 : 0, packed.length);
  };
  p.then(
    (items) => settle(true, items),
    (e) => settle(false, [String(e?.message ?? e)]),
  );
}

// A KV call's promise p, failed if it has not settled within waitMs (none for 0): a stalled KV
// must not hold the request until the origin gives up on it (edge/relay KVTimeout, which Go's
// waitMs passes on).
function bounded(p, waitMs) {
  if (!(waitMs > 0)) return p;
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`KV did not answer within ${waitMs} ms`)), waitMs);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

// A KV read's items for getAll: "0" and its value, "1" and null for a missing key, "2" and the
// failure's message.
const readResult = (p) =>
  p.then(
    (v) => (v === null ? ["1", null] : ["0", v]),
    (e) => ["2", String(e?.message ?? e)],
  );

// Requests handed to Go and not yet answered, by id: their method, headers and body until Go
// takes them (io.take), and the function that answers them (io.done).
const requests = new Map();
let nextRequest = 0; // the last id given (nextRequestId)

// The Go side's I/O primitives (edge/cmd/worker/js.go). Each operation takes the id Go waits under
// and settles it once, whatever number of promises it involves. Arguments are numbers: addresses
// and lengths in Go's memory.
const io = {
  // Copies the packed result of operation id to Go's memory at ptr, which has room for it; Go asks
  // only for a result that is not empty.
  result(id, ptr) {
    const packed = results.get(id);
    results.delete(id);
    bytesAt(ptr, packed.length).set(packed);
  },
  // Writes request id's method, headers and first bodyLen body bytes to ptr, one after another; of
  // a body that was not read (requestBody), none: Go's fresh buffer holds zeros there.
  take(id, ptr, bodyLen) {
    const r = requests.get(id);
    const out = bytesAt(ptr, r.method.length + r.headers.length + bodyLen);
    out.set(r.method);
    out.set(r.headers, r.method.length);
    if (bodyLen > 0) out.set(r.body.subarray(0, bodyLen), r.method.length + r.headers.length);
    r.body = null; // Go has what it needs
  },
  // Answers request id.
  done(id, status, headersPtr, headersLen, bodyPtr, bodyLen) {
    const r = requests.get(id);
    requests.delete(id);
    r.answer(status, stringAt(headersPtr, headersLen), bytesAt(bodyPtr, bodyLen).slice());
  },
  // Reads the packed (binding, key, binding, key, …) at once; settles the items of each read in
  // their order, a read that has not answered within waitMs (0: no limit) as failed.
  getAll(id, ptr, len, waitMs) {
    settleWith(id, () => {
      const nsKeys = unpack(ptr, len);
      const reads = [];
      for (let i = 0; i + 1 < nsKeys.length; i += 2) reads.push(readResult(bounded(env[nsKeys[i]].get(nsKeys[i + 1]), waitMs)));
      return Promise.all(reads).then((rs) => rs.flat());
    });
  },
  // Writes the packed (binding, key, value); settles no items, or fails if the write has not
  // answered within waitMs (0: no limit).
  put(id, ptr, len, ttlSeconds, waitMs) {
    settleWith(id, () => {
      const [ns, key, value] = unpack(ptr, len);
      return bounded(env[ns].put(key, value, { expirationTtl: ttlSeconds }), waitMs).then(() => []);
    });
  },
  // One POST to a subscriber, aborted (connection and all) after timeoutMs; settles
  // [status, headerText, body excerpt or null], status "-1" on a timeout before the status arrived;
  // fails when unreachable.
  post(id, urlPtr, urlLen, headersPtr, headersLen, bodyPtr, bodyLen, timeoutMs, maxBytes) {
    settleWith(id, () => {
      const body = bytesAt(bodyPtr, bodyLen).slice(); // Go's memory is reused; fetch reads later
      return post(stringAt(urlPtr, urlLen), stringAt(headersPtr, headersLen), body, timeoutMs, maxBytes);
    });
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
    // The subscriber has answered once its status is here: a body that then breaks off or stalls
    // past the timeout (the abort) costs the rest of the excerpt only, not the answer (a 2xx must
    // still get its dedup mark), as in the harness.
    const out = await excerpt(res, maxBytes).catch(() => null);
    return [String(res.status), headerText(res.headers), out];
  } catch (e) {
    if (timedOut) return ["-1", "", null];
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

let instance; // Promise of the live instance: { serve, bodyCap, track, untrack }

function start(isolateEnv, ctx) {
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
    memory = wasm.exports.mem;
    env = isolateEnv;
    // Calls a Go export that hands work to a goroutine, then lets Go's scheduler run it. Only from
    // a promise callback (a request's start, an operation's outcome), never while Go runs — from an
    // io function, say: Go's exports may not be entered from inside Go. An instance that has
    // exited takes nothing more (its requests are answered by their crash answers, respond).
    let running = false;
    const wake = (fn, ...args) => {
      if (go.exited) return;
      if (running) throw new Error("edgehook loader: Go was woken while it was running");
      running = true;
      try {
        fn(...args);
        go._resume();
      } finally {
        running = false;
      }
    };
    live = { exports: wasm.exports, wake };
    // env is the same for every request of an isolate; ctx belongs to this first request, and the
    // Go side never uses it (no waitUntil), so later requests do not depend on it.
    const exited = go.run(wasm, createRuntimeContext({ env: isolateEnv, ctx, binding })).then(
      () => "the Go instance exited",
      (e) => `the Go instance failed: ${e}`,
    );
    // The crash answer of each request in this instance (respond), until it is answered.
    const inFlight = new Set();
    let gone = null; // why the instance ended, once it has
    exited.then((why) => {
      gone = why;
      for (const crashed of inFlight) crashed(why);
      // Its requests were answered 500 (above); its operations' outcomes are dropped.
      requests.clear();
      results.clear();
      live = undefined;
      if (instance === started) instance = undefined; // the next request starts a new one
    });
    const early = await Promise.race([isReady.then(() => null), exited]);
    if (early) throw new Error(early);
    // A plain call: it only returns a number, so Go's scheduler needs no resumption (wake).
    const bodyCap = wasm.exports.edgehookBodyCap();
    return {
      serve: (...args) => wake(wasm.exports.edgehookServe, ...args),
      bodyCap,
      // Calls crashed(why) if the instance ends before untrack(crashed), at once if it has ended.
      track: (crashed) => (gone === null ? inFlight.add(crashed) : crashed(gone)),
      untrack: (crashed) => inFlight.delete(crashed),
    };
  })();
  started.catch(() => {
    if (instance === started) instance = undefined; // the next request tries again
  });
  return started;
}

const NULL_BODY_STATUS = new Set([101, 204, 205, 304]);

async function handle(req, serve, bodyCap) {
  // The body lives only in r, whose io.take drops it once Go has it.
  const r = {
    ...(await requestBody(req, bodyCap)),
    method: encoder.encode(req.method),
    headers: encoder.encode(headerText(req.headers)),
  };
  const id = (nextRequest = nextRequestId(nextRequest, requests));
  const [status, headerLines, out] = await new Promise((answer) => {
    r.answer = (...a) => answer(a);
    requests.set(id, r);
    serve(id, r.method.length, r.headers.length, r.bodyLen);
  });
  return new Response(NULL_BODY_STATUS.has(status) ? null : out, { status, headers: parseHeaders(headerLines) });
}

async function respond(req, env, ctx) {
  instance ??= start(env, ctx);
  const go = await instance;
  // If the instance dies while this request is in it, answer instead of hanging. Not a
  // Promise.race with a promise of the instance's end: each race would leave a reaction on that
  // promise, holding the request's answer, for as long as the instance lives (a leak of some KB per
  // request, and ever longer garbage collections).
  return new Promise((resolve, reject) => {
    const crashed = (why) =>
      resolve(
        new Response(`rejected:edge_crashed: ${why}\n`, {
          status: 500,
          headers: { "Edgehook-Outcome": "rejected:edge_crashed", "Content-Type": "text/plain; charset=utf-8" },
        }),
      );
    go.track(crashed);
    handle(req, go.serve, go.bodyCap).then(
      (res) => {
        go.untrack(crashed);
        resolve(res);
      },
      (e) => {
        go.untrack(crashed);
        reject(e);
      },
    );
  });
}

export default {
  fetch(req, env, ctx) {
    // Workers cancels a request's outstanding work when its client disconnects, unless it is
    // covered by waitUntil: the request's KV and fetch promises would then never settle, leaving
    // its goroutine parked for good and losing the dedup write after a forward (a retry would be
    // delivered twice). So the work runs to its answer whether or not anyone still waits for it.
    const answer = respond(req, env, ctx);
    ctx.waitUntil(answer.catch(() => {})); // a failure is the response's, reported once
    return answer;
  },
};

