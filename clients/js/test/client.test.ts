import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { SyncdClient, SyncdError, type EntityChangedEvent } from "../src/index.js";
import { startDaemon, startServer, type Daemon } from "./daemon.js";

const WS = WebSocket; // the ws package, no cast: it fits WebSocketConstructor

async function until(what: string, cond: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 30000;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 20)); // polling a real daemon
  }
}

describe("the client against a real daemon", () => {
  let d: Daemon;
  let c: SyncdClient;
  before(async () => {
    d = await startDaemon();
    c = new SyncdClient({ addr: d.addr, token: d.token, WebSocket: WS });
    await c.setSession("alice", "alice.dev");
  });
  after(async () => {
    await d.stop();
  });

  it("writes, reads, lists and deletes entities", async () => {
    const e = await c.create("note", { title: "Buy milk" }, { id: "n1" });
    assert.equal(e.id, "n1");
    assert.equal(e.syncState, "pending");
    assert.ok(e.operationId);
    const u = await c.update("note", "n1", { done: true });
    assert.deepEqual(u.data, { title: "Buy milk", done: true });
    await until("synced", async () => (await c.get("note", "n1")).syncState === "synced");
    const r = await c.refresh("note", "n1");
    assert.equal(r.syncState, "synced");
    assert.deepEqual(r.data, { title: "Buy milk", done: true });
    await assert.rejects(c.refresh("note", "nowhere"), (err: unknown) => err instanceof SyncdError && err.code === "not_found");
    const page = await c.list("note", { limit: 10 });
    assert.equal(page.items.length, 1);
    const all = [];
    for await (const x of c.all("note")) all.push(x);
    assert.equal(all.length, 1);
    const del = await c.delete("note", "n1");
    assert.equal(del.deleted, true);
    await assert.rejects(c.get("note", "n1"), (err: unknown) => err instanceof SyncdError && err.code === "not_found" && err.status === 404);
  });

  it("gives errors their stable code", async () => {
    await assert.rejects(c.create("note", { x: 1 }, { id: "." }), (err: unknown) => err instanceof SyncdError && err.code === "invalid_request");
    await c.create("note", {}, { id: "taken" });
    await assert.rejects(c.create("note", {}, { id: "taken" }), (err: unknown) => err instanceof SyncdError && err.code === "entity_exists");
    const bad = new SyncdClient({ addr: d.addr, token: "wrong" });
    await assert.rejects(bad.status(), (err: unknown) => err instanceof SyncdError && err.code === "unauthorized");
    await assert.rejects(c.resolve("note", "taken", "server"), (err: unknown) => err instanceof SyncdError && err.code === "no_conflict");
  });

  it("reuses the key of a write it sends again", async () => {
    const key = "js-key-1";
    const a = await c.create("note", { v: 1 }, { id: "k1", idempotencyKey: key });
    const b = await c.create("note", { v: 1 }, { id: "k1", idempotencyKey: key });
    assert.equal(a.operationId, b.operationId);
    await assert.rejects(c.create("note", { v: 2 }, { id: "k1", idempotencyKey: key }),
      (err: unknown) => err instanceof SyncdError && err.code === "idempotency_key_reused");
    const ops = await c.operations({ limit: 1000 });
    assert.equal(ops.items.filter((o) => o.id === key).length, 1);
  });

  it("makes a batch all or none", async () => {
    const res = await c.batch([
      { op: "create", type: "note", id: "b1", data: { v: 1 } },
      { op: "create", type: "note", id: "b2", data: { v: 2 } },
    ], { ordered: true });
    assert.equal(res.length, 2);
    await assert.rejects(
      c.batch([{ op: "create", type: "note", id: "b3", data: {} }, { op: "delete", type: "note", id: "nope" }]),
      (err: unknown) => err instanceof SyncdError && err.index === 1 && err.code === "not_found",
    );
    await assert.rejects(c.get("note", "b3"), (err: unknown) => err instanceof SyncdError && err.code === "not_found");
  });

  it("reads the versions the server keeps, with stable error codes", async () => {
    const e = await c.create("note", { title: "v1" }, { id: "h1" });
    await until("h1 synced", async () => (await c.get("note", "h1")).syncState === "synced");
    await c.update("note", "h1", { title: "v2" });
    await until("h1's update synced", async () => (await c.get("note", "h1")).syncState === "synced");
    const vs = await c.versions("note", "h1");
    assert.deepEqual(vs.map((v) => [v.version, v.data]), [[2, { title: "v2" }], [1, { title: "v1" }]]);
    assert.equal(vs[1]!.operationId, e.operationId);
    assert.ok(vs[0]!.updatedAt);
    await assert.rejects(c.versions("note", "nowhere"), (err: unknown) => err instanceof SyncdError && err.code === "not_found");
    // The server refuses the create (its test hook): it never has a record of it.
    const bad = await c.create("note", { invalid: true }, { id: "h2" });
    await until("h2 refused", async () => (await c.operation(bad.operationId!)).state === "permanent_failed");
    await assert.rejects(c.versions("note", "h2"),
      (err: unknown) => err instanceof SyncdError && err.code === "not_on_server" && err.status === 409);
    await c.discard(bad.operationId!);
  });

  it("retries and discards a failed operation, reads status", async () => {
    const e = await c.create("note", { invalid: true }, { id: "bad" });
    const id = e.operationId!;
    await until("failed", async () => (await c.operation(id)).state === "permanent_failed");
    const r = await c.retry(id);
    assert.equal(r.state, "pending");
    await until("failed again", async () => (await c.operation(id)).state === "permanent_failed");
    await c.discard(id);
    await assert.rejects(c.operation(id), (err: unknown) => err instanceof SyncdError && err.code === "not_found");
    const st = await c.status();
    assert.equal(st.signedIn, true);
    assert.equal(st.accountId, "alice");
    assert.ok(st.pull);
  });
});

describe("a daemon that restarts", () => {
  it("gets a write retried with the same key: one operation", async () => {
    const first = await startDaemon();
    const { dataDir, port, token } = first;
    const c = new SyncdClient({ addr: first.addr, token, retries: 8, retryDelayMs: 100 });
    await c.setSession("alice", "alice.dev");
    await first.stop();
    // The call starts while nothing listens (connection refused) and
    // goes through once the daemon is back, with the key it made.
    const write = c.create("note", { v: 1 }, { id: "r1" });
    const second = await startDaemon({ dataDir, port });
    const e = await write;
    const again = new SyncdClient({ addr: second.addr, token });
    const ops = await again.operations({ limit: 1000 });
    assert.equal(ops.items.filter((o) => o.entityId === "r1").length, 1);
    assert.equal(e.id, "r1");
    const out = await again.logout("purge", true);
    assert.equal(typeof out.purged, "number");
    assert.equal((await again.status()).signedIn, false);
    await second.stop();
  });
});

describe("events across a SIGKILL of the daemon", () => {
  it("resumes after the last event, none lost or repeated", async () => {
    let d = await startDaemon();
    const c = new SyncdClient({ addr: d.addr, token: d.token, WebSocket: WS });
    await c.setSession("alice", "alice.dev");
    const since = (await c.status()).lastEventSeq;
    const seen: EntityChangedEvent[] = [];
    const sub = c.subscribe({ since, type: "entity.changed", minDelayMs: 50, maxDelayMs: 200 });
    const reader = (async () => {
      for await (const e of sub) {
        if (e.type === "resync") continue;
        seen.push(e);
        if (seen.filter((x) => x.type === "entity.changed" && x.syncState === "pending").length >= 6) break;
      }
    })();
    for (let i = 0; i < 3; i++) await c.create("note", { i }, { id: `e${i}` });
    await until("three events", async () => seen.length >= 3);
    await d.kill();
    // Written while the client is disconnected: replayed after the restart.
    d = await startDaemon({ dataDir: d.dataDir, port: d.port });
    for (let i = 3; i < 6; i++) await c.create("note", { i }, { id: `e${i}` });
    await reader;
    sub.close();
    const pendingIds = seen.filter((x) => x.syncState === "pending").map((x) => x.entityId);
    assert.deepEqual(pendingIds, ["e0", "e1", "e2", "e3", "e4", "e5"]);
    const seqs = seen.map((x) => x.seq);
    assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => a - b), "no event twice, in order");
    await d.stop();
  });

  it("surfaces a resync when the events asked for are gone", async () => {
    const d = await startDaemon();
    const c = new SyncdClient({ addr: d.addr, token: d.token, WebSocket: WS });
    const sub = c.subscribe({ since: 1e15 });
    const first = await sub[Symbol.asyncIterator]().next();
    sub.close();
    assert.equal(first.value?.type, "resync");
    await d.stop();
  });
});

describe("two devices and a server that rejects conflicts", () => {
  it("shows a conflict and resolves it", async () => {
    const server = await startServer(["--reject-conflicts", "note"]);
    const a = await startDaemon({ args: ["--remote", server.url] });
    const ca = new SyncdClient({ addr: a.addr, token: a.token, WebSocket: WS });
    await ca.setSession("alice", "alice.a");
    await ca.create("note", { v: 0 }, { id: "x" });
    await until("A synced", async () => (await ca.get("note", "x")).syncState === "synced");

    let b = await startDaemon({ args: ["--remote", server.url, "--pull", "on"] });
    let cb = new SyncdClient({ addr: b.addr, token: b.token, WebSocket: WS });
    await cb.setSession("alice", "alice.b");
    await until("B pulled x", async () => (await cb.list("note")).items.length === 1);
    // B goes on without pulling: it will not see A's next edit.
    await b.stop();
    b = await startDaemon({ dataDir: b.dataDir, port: b.port, args: ["--remote", server.url, "--pull", "off"] });
    cb = new SyncdClient({ addr: b.addr, token: b.token, WebSocket: WS });

    await ca.update("note", "x", { by: "A" });
    await until("A's edit synced", async () => (await ca.get("note", "x")).syncState === "synced");
    const events: string[] = [];
    const sub = cb.subscribe({ since: (await cb.status()).lastEventSeq, onEvent: (e) => {
      if (e.type === "entity.changed" && e.entityId === "x") events.push(e.syncState);
    } });
    await cb.update("note", "x", { by: "B" });
    await until("B in conflict", async () => (await cb.get("note", "x")).syncState === "conflict");
    const x = await cb.get("note", "x");
    assert.deepEqual(x.server?.data, { v: 0, by: "A" });
    const r = await cb.resolve("note", "x", "server");
    assert.equal(r.syncState, "synced");
    assert.deepEqual(r.data, { v: 0, by: "A" });
    await until("the callback saw the conflict", async () => events.includes("conflict"));
    sub.close();
    await b.stop();
    await a.stop();
    await server.stop();
  });
});

describe("two devices and a server that merges field by field", () => {
  it("shows the fields in conflict, merges the others, and resolves per field or with merged data", async () => {
    const server = await startServer();
    const a = await startDaemon({ args: ["--remote", server.url] });
    const ca = new SyncdClient({ addr: a.addr, token: a.token, WebSocket: WS });
    await ca.setSession("alice", "alice.a");
    const ids = ["x", "y", "z"];
    for (const id of ids) await ca.create("note", { title: "Groceries", done: false }, { id });
    await until("A synced", async () => (await ca.list("note", { syncState: "synced" })).items.length === 3);

    let b = await startDaemon({ args: ["--remote", server.url, "--pull", "on"] });
    let cb = new SyncdClient({ addr: b.addr, token: b.token, WebSocket: WS });
    await cb.setSession("alice", "alice.b");
    await until("B pulled the notes", async () => (await cb.list("note")).items.length === 3);
    // B goes on without pulling: it will not see A's next edits.
    await b.stop();
    b = await startDaemon({ dataDir: b.dataDir, port: b.port, args: ["--remote", server.url, "--pull", "off"] });
    cb = new SyncdClient({ addr: b.addr, token: b.token, WebSocket: WS });

    for (const id of ids) await ca.update("note", id, { title: "Shopping" });
    await until("A's edits synced", async () => (await ca.list("note", { syncState: "synced" })).items.length === 3);
    const events: EntityChangedEvent[] = [];
    const sub = cb.subscribe({ since: (await cb.status()).lastEventSeq, type: "entity.changed", onEvent: (e) => {
      if (e.type === "entity.changed") events.push(e);
    } });

    // z: B changes another field than A did: both land, and the server's
    // answer brings A's title in.
    const zu = await cb.update("note", "z", { done: true });
    const zop = await cb.operation(zu.operationId!);
    assert.deepEqual(zop.paths, ["/done"]);
    await until("z synced", async () => (await cb.get("note", "z")).syncState === "synced");
    assert.deepEqual((await cb.get("note", "z")).data, { title: "Shopping", done: true });
    await until("z's merged event", async () => events.some((e) => e.entityId === "z" && e.data?.origin === "answer"));
    const merged = events.find((e) => e.entityId === "z" && e.data?.origin === "answer")!;
    assert.deepEqual(merged.data?.paths, ["/title"]);

    // x and y: B changes the title A changed too: a conflict on /title only.
    for (const id of ["x", "y"]) await cb.update("note", id, { title: "Food", done: true });
    await until("x and y in conflict", async () => (await cb.list("note", { syncState: "conflict" })).items.length === 2);
    const x = await cb.get("note", "x");
    assert.deepEqual(x.conflict, { paths: [{ path: "/title", base: "Groceries", baseKnown: true, local: "Food", server: "Shopping" }] });
    assert.deepEqual(x.server?.paths, ["/title"]);
    assert.deepEqual(x.server?.base, { title: "Groceries", done: false });
    await until("the conflict's event", async () => events.some((e) => e.entityId === "x" && e.syncState === "conflict"));
    const ev = events.find((e) => e.entityId === "x" && e.syncState === "conflict")!;
    assert.deepEqual(ev.data?.conflictPaths, ["/title"]);

    // Per field: A's title, B's done.
    await assert.rejects(cb.resolve("note", "x", { paths: { "/done": "local" } }),
      (err: unknown) => err instanceof SyncdError && err.code === "invalid_request" && err.status === 400);
    const rx = await cb.resolve("note", "x", { paths: { "/title": "server" } });
    assert.equal(rx.syncState, "pending");
    assert.ok(rx.operationId);
    assert.equal(rx.conflict, undefined);
    assert.deepEqual(rx.data, { title: "Shopping", done: true });
    assert.deepEqual((await cb.operation(rx.operationId!)).paths, ["/done"]);
    // The app's own merge.
    const ry = await cb.resolve("note", "y", { data: { title: "Food & Shopping", done: true } });
    assert.ok(ry.operationId);
    await until("x and y synced", async () => (await cb.list("note", { syncState: "synced" })).items.length === 3);
    assert.deepEqual((await cb.get("note", "y")).data, { title: "Food & Shopping", done: true });

    const vs = await cb.versions("note", "x");
    assert.deepEqual(vs.map((v) => [v.version, v.data]), [
      [3, { title: "Shopping", done: true }],
      [2, { title: "Shopping", done: false }],
      [1, { title: "Groceries", done: false }],
    ]);
    assert.equal(vs[0]!.operationId, rx.operationId);
    sub.close();
    await b.stop();
    await a.stop();
    await server.stop();
  });
});
