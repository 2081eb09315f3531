// Interoperability with the reference Standard Webhooks implementation that subscribers verify with
// (npm standardwebhooks, pinned in package.json), both ways:
// (a) the real origin (bin/edgehook serve) delivers in direct mode to a receiver on 127.0.0.1 that
//     verifies every delivery on arrival with the reference Webhook.verify, before and during a
//     secret rotation, with ASCII and non-ASCII bodies;
// (b) signatures made by the reference library are checked by ours (shared/signature, through
//     interop/verify), and both must agree on each, tolerance and refusals included.
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { Webhook, WebhookVerificationError } from "standardwebhooks";

const run = promisify(execFile);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = process.env.EDGEHOOK_BIN ?? path.join(root, "bin/edgehook"); // make bin/edgehook
let dir, verifyBin;

before(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "edgehook-interop-"));
  verifyBin = path.join(dir, "verify");
  await run(process.env.GO ?? "go", ["build", "-o", verifyBin, "./interop/verify"], { cwd: root });
});
after(() => rm(dir, { recursive: true, force: true }));

// Event data, which is the delivery body byte for byte: ASCII; raw UTF-8 of two, three and four
// bytes, combining and right-to-left; JSON escapes of the same (a surrogate pair); the characters
// JavaScript and Go treat specially (U+2028, U+2029, U+FEFF); a bare string; inner white space.
const bodies = [
  '{"video_id":"v1","rank":1}',
  '{"title":"Zoë – 東京タワー 🎉","rtl":"שלום","nfd":"e\u0301"}',
  '{"escaped":"\\u00e9\\u6771\\ud83c\\udf89","seps":"\u2028\u2029","bom":"\ufeff"}',
  '"🎉 Ωmega"',
  '[1, 2.5e3, null, true, {"k": "ø"}]',
];

/** A whsec_ secret of n random bytes, as any sender makes them. */
const newSecret = (n = 32) => "whsec_" + randomBytes(n).toString("base64");

/** The reference library's verdict: null if one of secrets verifies the message, else the error. */
function referenceVerify(secrets, headers, body) {
  let err;
  for (const s of secrets) {
    try {
      new Webhook(s).verify(body, headers);
      return null;
    } catch (e) {
      assert.ok(e instanceof WebhookVerificationError, `not a verification error: ${e.stack}`);
      err = e;
    }
  }
  return err;
}

/**
 * A subscriber's endpoint: verifies each delivery with the reference library as it arrives, with
 * every secret `expect` holds for its webhook-id, answers 204 or 400, and records the first verdict
 * per id (null, or what was wrong).
 */
async function startReceiver() {
  const r = { expect: new Map(), verdicts: new Map() };
  const stranger = newSecret();
  const check = (headers, body) => {
    const want = r.expect.get(headers["webhook-id"]);
    assert.ok(want, `unexpected webhook-id ${headers["webhook-id"]}`);
    assert.equal(body.toString("hex"), Buffer.from(want.data).toString("hex"), "body bytes");
    assert.equal(headers["webhook-signature"].split(" ").length, want.secrets.length, "signatures in the header");
    for (const s of want.secrets) assert.deepEqual(new Webhook(s).verify(body, headers), JSON.parse(want.data));
    // The same library refuses the delivery under another secret and with its body changed.
    assert.throws(() => new Webhook(stranger).verify(body, headers), WebhookVerificationError);
    assert.throws(() => new Webhook(want.secrets[0]).verify(Buffer.concat([body, Buffer.from(" ")]), headers), WebhookVerificationError);
  };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      let verdict = null;
      try {
        check(req.headers, Buffer.concat(chunks));
      } catch (e) {
        verdict = e.message;
      }
      const id = req.headers["webhook-id"];
      if (!r.verdicts.has(id)) r.verdicts.set(id, verdict);
      res.writeHead(verdict === null ? 204 : 400).end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  r.url = `http://127.0.0.1:${server.address().port}/hook`;
  r.close = () => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  };
  /** Waits until every id has a verdict, then asserts each is null (verified). */
  r.verified = async (ids) => {
    for (const deadline = Date.now() + 30_000; !ids.every((id) => r.verdicts.has(id)); await delay(50)) {
      assert.ok(Date.now() < deadline, `no delivery within 30s of ${ids.filter((id) => !r.verdicts.has(id))}`);
    }
    assert.deepEqual(ids.filter((id) => r.verdicts.get(id) !== null).map((id) => `${id}: ${r.verdicts.get(id)}`), []);
  };
  return r;
}

/** Runs `edgehook serve` on db until stopped; resolves to its API's base URL and stop(). */
async function startOrigin(db) {
  const proc = spawn(bin, ["--db", db, "--log-format", "json", "serve", "--listen", "127.0.0.1:0",
    "--allow-network", "127.0.0.0/8", "--poll-interval", "100ms", "--backoff-base", "100ms", "--backoff-cap", "1s"],
  { stdio: ["ignore", "ignore", "pipe"] });
  const log = [];
  const exited = new Promise((resolve) => proc.on("exit", resolve));
  const addr = await new Promise((resolve, reject) => {
    readline.createInterface({ input: proc.stderr }).on("line", (line) => {
      log.push(line);
      try {
        const rec = JSON.parse(line);
        if (rec.msg === "serving" && rec.addr) resolve(rec.addr);
      } catch {}
    });
    exited.then((code) => reject(new Error(`edgehook serve exited (${code}) before serving:\n${log.join("\n")}`)));
  });
  return {
    api: `http://${addr}`,
    stop: async () => {
      proc.kill("SIGTERM");
      assert.equal(await exited, 0, `edgehook serve:\n${log.join("\n")}`);
    },
  };
}

/** Runs an edgehook command on db and returns its JSON output. */
async function edgehook(db, ...args) {
  const { stdout } = await run(bin, ["--db", db, ...args]);
  return JSON.parse(stdout);
}

test("the reference library verifies the origin's deliveries, before and during a secret rotation", { timeout: 120_000 }, async () => {
  const db = path.join(dir, "edgehook.db");
  const receiver = await startReceiver();
  try {
    const { secret: first } = await edgehook(db, "subscribers", "add", "--id", "sub_interop", "--url", receiver.url,
      "--events", "interop.*", "--rate", "100", "--burst", "100");
    const origin = await startOrigin(db);
    try {
      const emit = async (phase, secrets) => {
        const ids = bodies.map((_, i) => `evt_${phase}_${i}`);
        for (const [i, data] of bodies.entries()) {
          receiver.expect.set(ids[i], { data, secrets });
          // The data is spliced in as text so that it reaches the origin byte for byte.
          const res = await fetch(`${origin.api}/v1/events`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: `{"id":"${ids[i]}","type":"interop.test","data":${data}}`,
          });
          assert.equal(res.status, 202, await res.text());
        }
        await receiver.verified(ids);
      };
      await emit("one", [first]);
      // While serve runs, as an operator would: the old secret stays valid for an hour, and each
      // delivery carries a signature by each secret. A receiver that has either one accepts it.
      const { secret: second } = await edgehook(db, "subscribers", "rotate-secret", "sub_interop", "--overlap", "1h");
      await emit("rotating", [second, first]);
    } finally {
      await origin.stop();
    }
  } finally {
    await receiver.close();
  }
});

test("our verifier accepts what the reference library signs, and refuses what it refuses", async () => {
  const [a, b, short, long] = [newSecret(), newSecret(), newSecret(24), newSecret(64)];
  const now = Math.floor(Date.now() / 1000);
  /** A message signed by the reference library with each of signers, checked with verifiers. */
  const message = ({ name, signers, verifiers = signers, id = "msg_2Lx8fJ", skew = 0, body = bodies[0], sent = body, ok = true }) => {
    const ts = now + skew;
    const signature = signers.map((s) => new Webhook(s).sign(id, new Date(ts * 1000), body)).join(" ");
    const headers = { "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": signature };
    return { name, ok, headers, verifiers, body: Buffer.from(sent) };
  };
  const messages = [
    ...bodies.map((body, i) => message({ name: `body ${i}`, signers: [[a, short, long][i % 3]], body })),
    message({ name: "rotation, old secret", signers: [b, a], verifiers: [a] }),
    message({ name: "rotation, new secret", signers: [b, a], verifiers: [b] }),
    message({ name: "4 minutes old", signers: [a], skew: -240 }),
    message({ name: "4 minutes ahead", signers: [a], skew: 240 }),
    message({ name: "6 minutes old", signers: [a], skew: -360, ok: false }),
    message({ name: "6 minutes ahead", signers: [a], skew: 360, ok: false }),
    message({ name: "another secret", signers: [a], verifiers: [b], ok: false }),
    message({ name: "body changed", signers: [a], body: bodies[1], sent: bodies[1].replace("ë", "e"), ok: false }),
  ];
  const input = messages.map((m) => ({
    secrets: m.verifiers, id: m.headers["webhook-id"], timestamp: m.headers["webhook-timestamp"],
    signature: m.headers["webhook-signature"], body: m.body.toString("base64"),
  }));
  const ours = JSON.parse(execFileSync(verifyBin, { input: JSON.stringify(input), encoding: "utf8" }));
  assert.equal(ours.length, messages.length);
  for (const [i, m] of messages.entries()) {
    const reference = referenceVerify(m.verifiers, m.headers, m.body);
    assert.equal(reference === null, m.ok, `${m.name}: reference library: ${reference?.message ?? "verified"}`);
    assert.equal(ours[i] === "", m.ok, `${m.name}: shared/signature: ${ours[i] || "verified"}`);
  }
});
