// Runs Svix's npm client (svix 2.5.0) against a running hookd: the flow
// docs/svix.md promises. hookd's suite starts hookd and runs this script
// (internal/app/svix_sdk_test.go) with HOOKD_SDK_URL and HOOKD_SDK_TOKEN.
import http from "node:http";
import assert from "node:assert/strict";
import { Svix, Webhook } from "svix";

const base = process.env.HOOKD_SDK_URL;
const token = process.env.HOOKD_SDK_TOKEN;
if (!base || !token) {
  console.error("HOOKD_SDK_URL and HOOKD_SDK_TOKEN must be set");
  process.exit(2);
}

// A loopback endpoint answering `status`, recording each request.
let status = 200;
const got = [];
const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    got.push({ path: req.url, headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
    res.writeHead(status).end();
  });
});
await new Promise((ok) => receiver.listen(0, "127.0.0.1", ok));
const url = `http://127.0.0.1:${receiver.address().port}/hook`;

async function eventually(what, cond) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((ok) => setTimeout(ok, 20));
  }
}

// The deliveries (to path, if given) whose body holds marker, once there
// are at least n.
const deliveries = (marker, n, path) =>
  eventually(`${n} deliveries of ${marker}`, () => {
    const ds = got.filter((d) => d.body.includes(marker) && (!path || d.path === path));
    return ds.length >= n && ds;
  });

// Verifies with the svix-* headers alone, so verify cannot fall back on webhook-*.
function verify(secret, d) {
  const h = {};
  for (const [k, v] of Object.entries(d.headers)) if (k.startsWith("svix-")) h[k] = v;
  assert.equal(h["svix-id"], d.headers["webhook-id"], "svix-id is webhook-id");
  new Webhook(secret).verify(d.body, h); // throws if refused
}

const svix = new Svix(token, { serverUrl: base });
const start = new Date(Date.now() - 60_000);

// 1. An application and an endpoint to the loopback receiver.
const app = await svix.application.create({ name: "Node SDK", uid: "node-sdk-app" });
assert.equal(app.id, "node-sdk-app");
const same = await svix.application.getOrCreate({ name: "Node SDK", uid: "node-sdk-app" });
assert.equal(same.id, app.id);
const ep = await svix.endpoint.create(app.id, { url, description: "orders", uid: "orders-ep" });
assert.match(ep.id, /^ep_/);
assert.equal(ep.url, url);
const secret = (await svix.endpoint.getSecret(app.id, "orders-ep")).key;
// This client names an endpoint's filter eventTypes and its rate throttleRate.
const typed = await svix.endpoint.create(app.id, { url: `${url}/typed`, eventTypes: ["order.shipped"], throttleRate: 5 });
assert.deepEqual(typed.eventTypes, ["order.shipped"]);
assert.equal(typed.throttleRate, 5);
// The customer's way in: a portal link into hookd's dashboard.
const portal = await svix.authentication.appPortalAccess(app.id, { expiry: 600 });
assert.match(portal.url, /\/ui\/#\/portal\/pt_/);
assert.ok(portal.url.endsWith(portal.token));

// 2. A message arrives, and the SDK's own verify accepts its signature.
const msg = await svix.message.create(app.id, {
  eventType: "order.created",
  payload: { marker: "m-one" },
  eventId: "evt-one",
});
assert.match(msg.id, /^msg_/);
assert.equal(msg.eventId, "evt-one");
const d1 = (await deliveries("m-one", 1))[0];
verify(secret, d1);
assert.deepEqual(JSON.parse(d1.body), { marker: "m-one" }, "the body is the payload, as Svix sends it");

// 3. Its attempt is listed: a success...
const attempts = await eventually("the attempt of m-one", async () => {
  const list = await svix.messageAttempt.listByEndpoint(app.id, ep.id);
  return list.data.length === 1 && list;
});
assert.equal(attempts.data[0].msgId, msg.id);
assert.equal(attempts.data[0].status, 0);
assert.equal(attempts.data[0].responseStatusCode, 200);
assert.equal(attempts.data[0].statusText, "success");

// ... and recovered after a failure. Like Svix, hookd retries a 400 on an
// endpoint made here; with no retries (set through /v1, Svix's API has no
// such field) it fails at once, and recover sends it again once fixed.
const patched = await fetch(`${base}/v1/subscriptions/sub_${ep.id.slice(3)}`, {
  method: "PATCH",
  headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
  body: JSON.stringify({ retry_schedule: [] }),
});
assert.equal(patched.status, 200);
status = 400;
const failed = await svix.message.create(app.id, { eventType: "order.created", payload: { marker: "m-two" } });
await eventually("m-two failed", async () => {
  const list = await svix.messageAttempt.listByMsg(app.id, failed.id);
  return list.data.length === 1 && list.data[0].status === 2;
});
status = 200;
const task = await svix.endpoint.recover(app.id, ep.id, { since: start });
assert.equal(task.task, "endpoint.recover");
assert.ok(!Number.isNaN(task.updatedAt.getTime()), "the recover's updatedAt is a time");
verify(secret, (await deliveries("m-two", 2))[1]);

// 4. Rotate the secret: the next message verifies with the new one.
await svix.endpoint.rotateSecret(app.id, ep.id, {});
const rotated = (await svix.endpoint.getSecret(app.id, ep.id)).key;
assert.notEqual(rotated, secret);
await svix.message.create(app.id, { eventType: "order.created", payload: { marker: "m-three" } });
const d3 = (await deliveries("m-three", 1))[0];
verify(rotated, d3);
verify(secret, d3); // the old secret signs for 24 h more

// Moving off Svix: an endpoint made with the secret its receiver has
// signs with it. Repeats answer the first message, lists filter, and
// resend sends again (in an application of its own, so the counts above
// stay as they are).
const chosen = "whsec_" + Buffer.from("exported from svix's server").toString("base64");
const moved = await svix.application.create({ name: "Node SDK moved", uid: "node-sdk-moved" });
const movedEp = await svix.endpoint.create(moved.id, { url: `${url}/moved`, secret: chosen });
await svix.endpoint.create(moved.id, { url: `${url}/other` });
const create = (eventType, marker, eventId, idempotencyKey) =>
  svix.message.create(moved.id, { eventType, payload: { marker }, eventId }, { idempotencyKey });
const keyed = await create("order.created", "k-one", undefined, "node-sdk-key");
assert.equal((await create("order.created", "k-repeat", undefined, "node-sdk-key")).id, keyed.id);
verify(chosen, (await deliveries("k-one", 1, "/hook/moved"))[0]);
// Past keyed's millisecond, so a time can fall between it and the next.
await eventually("a millisecond after k-one", () => Date.now() > keyed.timestamp.getTime() + 1);
const shipped = await create("order.shipped", "e-one", "node-sdk-event", "node-sdk-key-2");
assert.equal((await create("order.shipped", "e-repeat", "node-sdk-event", "node-sdk-key-3")).id, shipped.id);
verify(chosen, (await deliveries("e-one", 1, "/hook/moved"))[0]);

const ids = async (opts) => (await svix.message.list(moved.id, opts)).data.map((m) => m.id).sort();
const between = new Date(keyed.timestamp.getTime() + 1);
assert.deepEqual(await ids({ eventTypes: ["order.shipped"] }), [shipped.id]);
assert.deepEqual(await ids({ eventTypes: ["order.shipped", "order.created"] }), [keyed.id, shipped.id].sort());
assert.deepEqual(await ids({ after: between }), [shipped.id]);
assert.deepEqual(await ids({ before: between }), [keyed.id]);
assert.deepEqual(await ids({ before: between, eventTypes: ["order.shipped"] }), []);

// Attempts of one message at one endpoint; then resend it there.
await eventually("k-one's attempt at each endpoint", async () =>
  (await svix.messageAttempt.listByMsg(moved.id, keyed.id)).data.length === 2);
const atMoved = await eventually("k-one's success at the moved endpoint", async () => {
  const list = await svix.messageAttempt.listByMsg(moved.id, keyed.id, { endpointId: movedEp.id });
  return list.data.length === 1 && list.data[0].status === 0 && list;
});
assert.equal(atMoved.data[0].endpointId, movedEp.id);
await svix.messageAttempt.resend(moved.id, keyed.id, movedEp.id);
const both = await deliveries("k-one", 2, "/hook/moved");
assert.equal(both[1].headers["svix-id"], both[0].headers["svix-id"], "resent with the same svix-id");
verify(chosen, both[1]);
assert.equal(got.filter((d) => d.body.includes("repeat")).length, 0, "no repeated message was sent");

// A call outside hookd's support answers Svix's error, not a crash.
await assert.rejects(svix.integration.list(app.id), (e) => {
  const body = typeof e.body === "string" ? JSON.parse(e.body) : e.body; // the client parses only some statuses
  return e.code === 501 && body.code === "not_implemented";
});

// 5. 250 applications, paged with the SDK's iterator.
for (let i = 0; i < 250; i++) {
  await svix.application.create({ name: `app ${i}`, uid: `page-${String(i).padStart(3, "0")}` });
}
const seen = new Set();
let iterator = null;
for (let pages = 0; ; pages++) {
  assert.ok(pages <= 10, "more than 10 pages");
  const page = await svix.application.list({ limit: 100, iterator });
  for (const a of page.data) {
    assert.ok(!seen.has(a.id), `application ${a.id} listed twice`);
    seen.add(a.id);
  }
  if (page.done) break;
  iterator = page.iterator;
}
assert.equal([...seen].filter((id) => id.startsWith("page-")).length, 250);
assert.ok(seen.has(app.id));

receiver.close();
console.log("node flow: ok");
