// The Worker's entry module: a loader around the files `go tool workers-assets-gen` generates
// (wasm_exec.js, runtime.mjs), copied next to them as index.mjs by `make worker`.
//
// The generated worker.mjs starts a new Go instance for every request, because the library's
// Serve returns after one. Ours starts one instance per isolate: main() installs binding.serve,
// calls Ready and then blocks forever, and every request goes to that instance's serve. If the
// instance ever exits, the request in it is answered 500 and the next request starts a new one.
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

let instance; // Promise of the live instance: { handleRequest, exited }

function start(env, ctx) {
  const started = (async () => {
    const mod = await loadModule();
    const go = new Go();
    const binding = {};
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

export default {
  async fetch(req, env, ctx) {
    instance ??= start(env, ctx);
    const { serve, exited } = await instance;
    // If the instance dies while this request is in it, answer instead of hanging.
    return Promise.race([
      serve(req),
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
