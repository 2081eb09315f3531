// bench-edge: requests/s of the Go Worker (the real bundle) against a plain JS Worker doing the
// same KV and fetch work (jsrelay.mjs), in the same Miniflare run, against one subscriber on
// 127.0.0.1. Bounded: a fixed number of requests per round. Writes EDGEHOOK_BENCH_OUT (JSON) and
// prints a table.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { Miniflare } from "miniflare";
import { bundleOptions, buildRequest, compatibilityDate, loadSuite, quiet, root, startSubscriber, suiteVars, workerDir } from "./lib.mjs";

// Many short rounds rather than a few long ones: each round runs Go then JS back to back, and the
// shorter the round, the more alike the machine's load for the two (it swings on shared machines).
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 20);
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 50); // per worker, per round, per concurrency level
const WARMUP = 100; // past wasm tier-up and the first GCs
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,8").split(",").map(Number);

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

// Sends n requests, concurrency at a time; returns requests/s and the workerd CPU µs per request.
async function run(worker, n, concurrency) {
  let next = 0;
  const start = performance.now();
  const cpu0 = workerdCPU();
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
  const rps = n / ((performance.now() - start) / 1000);
  return { rps, cpuUs: cpu0 === null ? null : (workerdCPU() - cpu0) / n / 1000 };
}

const results = [];
for (const c of CONCURRENCY) {
  const rps = { go: [], js: [] };
  const cpu = { go: [], js: [] };
  for (const name of ["go", "js"]) await run(workers[name], WARMUP, c);
  for (let r = 0; r < ROUNDS; r++) {
    for (const name of ["go", "js"]) {
      const m = await run(workers[name], REQUESTS, c);
      rps[name].push(m.rps);
      cpu[name].push(m.cpuUs);
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  // Each round runs Go then JS back to back, so a round's ratio sees the same machine load.
  const ratios = rps.go.map((g, i) => g / rps.js[i]);
  const go = median(rps.go), js = median(rps.js);
  results.push({
    concurrency: c, go_rps: round(go), js_rps: round(js), ratio: round(median(ratios), 2),
    ratio_min: round(Math.min(...ratios), 2), ratio_max: round(Math.max(...ratios), 2),
    go_ms: round(1000 / go, 2), js_ms: round(1000 / js, 2),
    ...(workerd && {
      go_cpu_us: round(median(cpu.go)), js_cpu_us: round(median(cpu.js)),
      cpu_ratio: round(median(cpu.js.map((j, i) => j / cpu.go[i])), 2),
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
  what: "Go Worker (build/worker) vs plain JS Worker (edge/workerd/jsrelay.mjs), same Miniflare run, same KV (2 concurrent gets + 1 put) and fetch to a subscriber on 127.0.0.1, ~1 KB body; req/s: median of rounds; ratio: median of per-round Go/JS (each round runs Go then JS back to back); cpu_us: CPU of the workerd process per request (all its threads: the Worker, KV, the proxy), median of rounds; cpu_ratio: median of per-round JS CPU / Go CPU",
  rounds: ROUNDS,
  requests_per_round: REQUESTS,
  workerd: JSON.parse(readFileSync(path.join(root, "node_modules/workerd/package.json"), "utf8")).version,
  bundle: { wasm_bytes: statSync(path.join(workerDir, "app.wasm")).size, wasm_gzip_bytes: gzipSync(wasm, { level: 9 }).length },
  results,
};
if (process.env.EDGEHOOK_BENCH_OUT) writeFileSync(process.env.EDGEHOOK_BENCH_OUT, JSON.stringify(out, null, 2) + "\n");
console.log("| concurrency | Go Worker req/s | JS Worker req/s | Go/JS (median of rounds) | Go/JS range | Go ms/req | JS ms/req | workerd CPU µs/req Go, JS | JS÷Go CPU |");
console.log("|---|---|---|---|---|---|---|---|---|");
for (const r of results) {
  console.log(`| ${r.concurrency} | ${r.go_rps} | ${r.js_rps} | ${r.ratio} | ${r.ratio_min}–${r.ratio_max} | ${r.go_ms} | ${r.js_ms} | ${r.go_cpu_us ?? "-"}, ${r.js_cpu_us ?? "-"} | ${r.cpu_ratio ?? "-"} |`);
}
console.log(`bundle: app.wasm ${out.bundle.wasm_bytes} bytes, ${out.bundle.wasm_gzip_bytes} gzipped; workerd ${out.workerd}`);
