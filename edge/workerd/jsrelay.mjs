// A plain JS Worker doing the relay's work on the happy path — verify the hop HMAC, read the
// subscriber record and the dedup mark from KV, forward with a deadline, write the dedup mark —
// as the yardstick for the Go Worker in bench.mjs. It is not a second implementation of the relay:
// it skips every rejection path.
const enc = new TextEncoder();

let keys; // the imported edge secrets, once per isolate

// The headers the Go relay never forwards (stripped in edge/relay/relay.go): hop headers, transport
// headers (Accept-Encoding too) and the origin connection's address headers.
const STRIPPED = new Set(["accept-encoding", "content-length", "connection", "x-real-ip", "host", "keep-alive",
  "proxy-connection", "proxy-authorization", "te", "trailer", "transfer-encoding", "true-client-ip", "forwarded", "upgrade"]);
const stripped = (k) => k.startsWith("edgehook-") || k.startsWith("cf-") || k.startsWith("x-forwarded-") || STRIPPED.has(k);

async function hmacKeys(env) {
  keys ??= await Promise.all(
    env.EDGE_SECRET.split(",").map((s) => {
      const raw = Uint8Array.from(atob(s.trim().replace(/^whsec_/, "")), (c) => c.charCodeAt(0));
      return crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
    }),
  );
  return keys;
}

export default {
  async fetch(req, env) {
    const h = req.headers;
    const hop = ["edgehook-hop-v1", h.get("edgehook-delivery-id"), h.get("edgehook-subscriber-id"),
      h.get("edgehook-event-type"), h.get("edgehook-coalesce-key") ?? "", h.get("edgehook-attempt"),
      h.get("edgehook-timestamp"), ""].join("\n");
    const body = new Uint8Array(await req.arrayBuffer());
    const signed = new Uint8Array([...enc.encode(hop), ...body]);
    const sig = Uint8Array.from(atob(h.get("edgehook-signature").slice(3)), (c) => c.charCodeAt(0));
    let ok = false;
    for (const k of await hmacKeys(env)) ok ||= await crypto.subtle.verify("HMAC", k, sig, signed);
    if (!ok) return new Response("bad signature", { status: 401 });
    const dedupKey = "d:" + h.get("edgehook-delivery-id");
    // Both reads at once, as the Go relay does.
    const [raw, mark] = await Promise.all([env.SUBSCRIBERS.get("sub:" + h.get("edgehook-subscriber-id")), env.DEDUP.get(dedupKey)]);
    const rec = JSON.parse(raw);
    if (mark !== null) return new Response("", { status: 200 });
    const fwd = new Headers(h);
    for (const k of [...fwd.keys()]) if (stripped(k)) fwd.delete(k);
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), rec.timeout_ms);
    const start = Date.now();
    const res = await fetch(rec.url, { method: "POST", headers: fwd, body, redirect: "manual", signal: abort.signal });
    const excerpt = (await res.text()).slice(0, 2048);
    clearTimeout(timer);
    if (res.ok) await env.DEDUP.put(dedupKey, String(start), { expirationTtl: Number(env.DEDUP_TTL_SECONDS) });
    return new Response(excerpt, {
      status: res.status,
      headers: { "Edgehook-Outcome": "forwarded", "Edgehook-Upstream-Latency-Ms": String(Date.now() - start) },
    });
  },
};
