// The excerpt of a subscriber body that breaks off or stalls, in the Worker (loader.mjs) in workerd.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { buildRequest, loadSuite, startSubscriber, startWorker, suiteVars } from "./lib.mjs";

const suite = loadSuite();

function signed(id, subscriberId, headers = {}, body = `{"n":"${id}"}`) {
  const b = buildRequest(suite, {
    hop: { delivery_id: id, subscriber_id: subscriberId, event_type: "video.trending", attempt: 1 },
    sign_with: ["current"],
    headers: { "content-type": "application/json", "webhook-id": "evt_" + id, ...headers },
    body,
  }, Date.now());
  return { method: "POST", headers: b.headers, body: b.body };
}

// relay.UpstreamResponse: the body excerpt holds "at most the first wire.MaxExcerptBytes bytes of the
// subscriber's body, fewer when it broke off or stalled past the timeout"; the harness
// (httpupstream) relays the bytes that did arrive. The loader reads a body declared within the
// excerpt's size with res.arrayBuffer(), which rejects when the body breaks off or the timeout
// aborts it, and the excerpt is then dropped whole (excerpt(...).catch(() => null)).
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
