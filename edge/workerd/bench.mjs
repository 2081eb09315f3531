// bench-edge: requests/s of the Go Worker (the real bundle) against a plain JS Worker doing the
// same KV and fetch work (jsrelay.mjs), in the same Miniflare run, against one subscriber on
// 127.0.0.1. Bounded: a fixed number of requests per worker and concurrency level. Writes
// EDGEHOOK_BENCH_OUT (JSON) and prints a table.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { Miniflare } from "miniflare";
import { bundleOptions, buildRequest, compatibilityDate, loadSuite, quiet, root, startSubscriber, suiteVars, workerDir } from "./lib.mjs";

// Go and JS take turns, in the order Go JS, JS Go, Go JS, ... so that both see the same machine
// (on a shared machine its load swings within a second) and neither always runs after the other.
// One pair of turns gives a Go/JS ratio that scatters widely (about ±30 % at concurrency 8), but
// consecutive pairs are uncorrelated (measured), so a run's ratio settles with the number of
// turns, not with their length. At concurrency 1 a turn is one request. At concurrency c > 1 it is
// two requests per lane: a turn starts with c requests at once and ends when its last is answered,
// and with one per lane it would be nothing but that ramp. turns: how many each worker gets.
const LEVELS = [
  { concurrency: 1, perTurn: 1, turns: 1000 }, // 1,000 requests to each worker
  { concurrency: 8, perTurn: 16, turns: 200 }, // 3,200 to each
];
const BLOCKS = 10; // ratio_min, ratio_max: the ratio of each tenth of the run
const WARMUP = 100; // requests per worker and level, past wasm tier-up and the first GCs

const suite = loadSuite();
const sub = await startSubscriber();
sub.setScript({ status: 200, body: "ok" });
const vars = suiteVars(suite);
// Both workers see the same namespaces (same ids) and the same vars.
const shared = { kvNamespaces: { SUBSCRIBERS: "subscribers", DEDUP: "dedup" }, bindings: vars, compatibilityDate: compatibilityDate() };
const mf = new Miniflare({
  cf: false,
  handleRuntimeStdio: quiet,
  workers: [
    { ...bundleOptions(), ...shared, name: "go" },
    { ...shared, name: "js", scriptPath: path.join(root, "edge/workerd/jsrelay.mjs"), modules: true },
  ],
});
const subs = await mf.getKVNamespace("SUBSCRIBERS", "go");
await subs.put("sub:sub_bench", JSON.stringify({ url: sub.url + "/hook", timeout_ms: 5000, active: true }));
const workers = { go: await mf.getWorker("go"), js: await mf.getWorker("js") };

// CPU time of the workerd process (every thread), in ns, from /proc: what a Worker costs the machine,
// which the load of other processes disturbs less than requests/s. null where /proc is missing.
const workerd = (() => {
  try {
    return execFileSync("pgrep", ["-P", String(process.pid), "workerd"]).toString().trim().split("\n")[0] || null;
  } catch {
    return null;
  }
})();
function workerdCPU() {
  if (!workerd) return null;
  let ns = 0;
  for (const task of readdirSync(`/proc/${workerd}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${workerd}/task/${task}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // the thread ended
    }
  }
  return ns;
}

const body = JSON.stringify({ video_id: "v1", rank: 3, title: "x".repeat(900) }); // ~1 KB
let seq = 0;
function request() {
  const id = `del_bench_${++seq}`;
  const b = buildRequest(suite, {
    hop: { delivery_id: id, subscriber_id: "sub_bench", event_type: "video.trending", attempt: 1 },
    sign_with: ["current"],
    headers: { "content-type": "application/json", "webhook-id": "evt_" + id },
    body,
  }, Date.now());
  return { method: "POST", headers: b.headers, body: b.body };
}

// One turn: sends n requests, concurrency at a time, and returns how long they took (ms) and the
// workerd CPU they used (ns, null without /proc), read outside the timed span.
async function turn(worker, n, concurrency) {
  let next = 0;
  const cpu0 = workerdCPU();
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < n) {
      next++;
      const res = await worker.fetch("http://edge.test/", request());
      const text = await res.text();
      if (res.status !== 200 || res.headers.get("edgehook-outcome") !== "forwarded") {
        throw new Error(`bench request answered ${res.status} ${res.headers.get("edgehook-outcome")}: ${text}`);
      }
    }
  }));
  const ms = performance.now() - start;
  return { ms, cpuNs: cpu0 === null ? null : workerdCPU() - cpu0 };
}

// Gives each worker turns turns of size requests at concurrency c, alternately, and returns each
// pair of turns' measurements: [{ go: {n, ms, cpuNs}, js: {...} }, ...].
async function interleaved(turns, size, c) {
  const pairs = [];
  for (let i = 0; i < turns; i++) {
    const pair = {};
    for (const name of i % 2 === 0 ? ["go", "js"] : ["js", "go"]) {
      pair[name] = { n: size, ...(await turn(workers[name], size, c)) };
    }
    pairs.push(pair);
  }
  return pairs;
}

// Sums the pairs' requests, time and CPU per worker.
function totals(pairs) {
  const t = { go: { n: 0, ms: 0, cpuNs: 0 }, js: { n: 0, ms: 0, cpuNs: 0 } };
  for (const p of pairs) {
    for (const name of ["go", "js"]) {
      t[name].n += p[name].n;
      t[name].ms += p[name].ms;
      t[name].cpuNs = p[name].cpuNs === null || t[name].cpuNs === null ? null : t[name].cpuNs + p[name].cpuNs;
    }
  }
  return t;
}

const rps = (w) => w.n / (w.ms / 1000);

const results = [];
for (const { concurrency: c, perTurn: size, turns } of LEVELS) {
  await interleaved(Math.ceil(WARMUP / size), size, c);
  const pairs = await interleaved(turns, size, c);
  const t = totals(pairs);
  const go = rps(t.go), js = rps(t.js);
  const per = Math.ceil(pairs.length / BLOCKS);
  const blocks = Array.from({ length: Math.ceil(pairs.length / per) }, (_, b) => totals(pairs.slice(b * per, (b + 1) * per)));
  const ratios = blocks.map((b) => rps(b.go) / rps(b.js));
  results.push({
    concurrency: c, per_turn: size, requests: t.go.n, go_rps: round(go), js_rps: round(js), ratio: round(go / js, 2),
    ratio_min: round(Math.min(...ratios), 2), ratio_max: round(Math.max(...ratios), 2),
    go_ms: round(1000 / go, 2), js_ms: round(1000 / js, 2),
    ...(t.go.cpuNs !== null && t.js.cpuNs !== null && {
      go_cpu_us: round(t.go.cpuNs / t.go.n / 1000), js_cpu_us: round(t.js.cpuNs / t.js.n / 1000),
      cpu_ratio: round((t.js.cpuNs / t.js.n) / (t.go.cpuNs / t.go.n), 2),
    }),
  });
}
await mf.dispose();
await sub.close();

function round(x, d = 1) {
  return Math.round(x * 10 ** d) / 10 ** d;
}

const wasm = readFileSync(path.join(workerDir, "app.wasm"));
const out = {
  what: "Go Worker (build/worker) vs plain JS Worker (edge/workerd/jsrelay.mjs), same Miniflare run, same KV (2 concurrent gets + 1 put) and fetch to a subscriber on 127.0.0.1, ~1 KB body; Go and JS take turns of `per_turn` requests (order Go JS, JS Go, ...), `requests` each; req/s: a worker's requests over the time of its turns; ratio: Go req/s / JS req/s; ratio_min, ratio_max: the lowest and highest ratio of the run's tenths; cpu_us: CPU of the workerd process per request (all its threads: the Worker, KV, the proxy) over the worker's turns; cpu_ratio: JS CPU / Go CPU per request",
  warmup: WARMUP,
  workerd: JSON.parse(readFileSync(path.join(root, "node_modules/workerd/package.json"), "utf8")).version,
  bundle: { wasm_bytes: statSync(path.join(workerDir, "app.wasm")).size, wasm_gzip_bytes: gzipSync(wasm, { level: 9 }).length },
  results,
};
if (process.env.EDGEHOOK_BENCH_OUT) writeFileSync(process.env.EDGEHOOK_BENCH_OUT, JSON.stringify(out, null, 2) + "\n");
console.log("| concurrency | requests per turn | Go Worker req/s | JS Worker req/s | Go/JS | Go/JS range of tenths | Go ms/req | JS ms/req | workerd CPU µs/req Go, JS | JS÷Go CPU |");
console.log("|---|---|---|---|---|---|---|---|---|---|");
for (const r of results) {
  console.log(`| ${r.concurrency} | ${r.per_turn} | ${r.go_rps} | ${r.js_rps} | ${r.ratio} | ${r.ratio_min}–${r.ratio_max} | ${r.go_ms} | ${r.js_ms} | ${r.go_cpu_us ?? "-"}, ${r.js_cpu_us ?? "-"} | ${r.cpu_ratio ?? "-"} |`);
}
console.log(`bundle: app.wasm ${out.bundle.wasm_bytes} bytes, ${out.bundle.wasm_gzip_bytes} gzipped; workerd ${out.workerd}`);
