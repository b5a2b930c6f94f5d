import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { SyncdClient, SyncdError, type SyncEvent } from "../src/index.js";
import { startDaemon, type Daemon } from "./daemon.js";

const WS = WebSocket; // the ws package, no cast: it fits WebSocketConstructor

describe("app tokens against a real daemon", () => {
  let d: Daemon;
  let admin: SyncdClient;
  before(async () => {
    d = await startDaemon();
    admin = new SyncdClient({ addr: d.addr, token: d.token, WebSocket: WS });
    await admin.setSession("alice", "alice.dev");
  });
  after(async () => {
    await d.stop();
  });

  it("scopes an app to its types, records it, and ends its stream when it is removed", async () => {
    const made = await admin.addApp("notes", ["note"]);
    assert.match(made.token ?? "", /^syncd_app_[0-9a-f]{64}$/);
    assert.deepEqual((await admin.apps()).map((a) => [a.name, a.token]), [["notes", undefined]]);
    const app = new SyncdClient({ addr: d.addr, token: made.token!, WebSocket: WS });

    const sub = app.subscribe({ since: 0 });
    const it = sub[Symbol.asyncIterator]();
    const n = await app.create("note", { title: "mine" }, { id: "n1" });
    await assert.rejects(app.create("task", {}, { id: "t1" }), (err: unknown) => err instanceof SyncdError && err.code === "type_not_granted");
    await assert.rejects(app.setSession("mallory", "x"), (err: unknown) => err instanceof SyncdError && err.code === "admin_required");
    assert.equal((await admin.operation(n.operationId!)).app, "notes");
    const st = await app.status();
    assert.deepEqual(st.app, { name: "notes", types: ["note"], readOnly: false });
    assert.equal(st.apps, undefined);

    let seen: SyncEvent | undefined;
    for (;;) {
      const r = await it.next();
      assert.equal(r.done, false);
      if (r.value.type === "operation.state" && r.value.entityId === "n1") {
        seen = r.value;
        break;
      }
    }
    assert.equal(seen?.app, "notes");

    // The app's status watch: it must not go on saying "online" once it
    // can no longer see anything.
    const states: string[] = [];
    let watchOpen: (() => void) | undefined;
    const watching = new Promise<void>((resolve) => (watchOpen = resolve));
    let watchEnded: (() => void) | undefined;
    const ended = new Promise<void>((resolve) => (watchEnded = resolve));
    const w = app.watchStatus({
      onChange: (s) => {
        states.push(`${s.state}:${s.error instanceof SyncdError ? s.error.code : ""}`);
        if (s.state === "online" || s.state === "offline") watchOpen?.();
        if (s.error !== undefined) watchEnded?.();
      },
    });
    await watching;

    await admin.removeApp("notes");
    await ended;
    assert.equal(w.current.state, undefined, `states: ${states.join(", ")}`);
    assert.ok(w.current.error instanceof SyncdError && ["token_revoked", "unauthorized"].includes(w.current.error.code), `states: ${states.join(", ")}`);
    const after = states.length;
    // Events delivered before the revocation are still handed out; then
    // the iterator throws, and nothing reconnects.
    await assert.rejects(
      (async () => {
        for (;;) await it.next();
      })(),
      (err: unknown) => err instanceof SyncdError && err.code === "token_revoked",
    );
    await assert.rejects(app.get("note", "n1"), (err: unknown) => err instanceof SyncdError && err.code === "unauthorized");
    assert.equal(states.length, after, `the ended watch changed again: ${states.join(", ")}`);
    w.close();
    sub.close();
  });

  it("ends a stream the daemon refuses with the refusal, and does not reconnect", async () => {
    // Count the sockets a stream opens: a refused handshake used to be
    // tried again every few seconds for as long as the app ran.
    let sockets = 0;
    class Counting extends WebSocket {
      constructor(url: string, protocols?: string | string[], opts?: WebSocket.ClientOptions) {
        super(url, protocols, opts);
        sockets++;
      }
    }
    const refusedWith = async (client: SyncdClient, opts: { entityType?: string }, code: string) => {
      sockets = 0;
      let disconnects = 0;
      const errors: SyncdError[] = [];
      const sub = client.subscribe({ ...opts, onDisconnect: () => disconnects++, onError: (err) => errors.push(err) });
      await assert.rejects(sub[Symbol.asyncIterator]().next(), (err: unknown) => err instanceof SyncdError && err.code === code);
      assert.deepEqual(errors.map((e) => e.code), [code]);
      assert.equal(disconnects, 0, "a refusal is not a disconnect");
      assert.equal(sockets, 1, "one handshake, no reconnect");
      sub.close();
    };
    const stranger = new SyncdClient({ addr: d.addr, token: "syncd_app_" + "0".repeat(64), WebSocket: Counting });
    await refusedWith(stranger, {}, "unauthorized");
    const made = await admin.addApp("tasks", ["task"]);
    const app = new SyncdClient({ addr: d.addr, token: made.token!, WebSocket: Counting });
    await refusedWith(app, { entityType: "note" }, "type_not_granted");

    // The status watch shows the refusal, not "unreachable".
    const changes: string[] = [];
    let w: ReturnType<SyncdClient["watchStatus"]> | undefined;
    await new Promise<void>((resolve) => {
      w = stranger.watchStatus({
        onChange: (s) => {
          changes.push(s.state ?? (s.error instanceof SyncdError ? s.error.code : "?"));
          if (s.error instanceof SyncdError && s.error.code === "unauthorized") resolve();
        },
      });
    });
    w?.close();
    assert.ok(!changes.includes("unreachable"), `status states: ${changes.join(", ")}`);
    await admin.removeApp("tasks");
  });

  it("keeps a stream for an account that is not signed in, and opens it when that account signs in", async () => {
    // account_not_granted depends on the session, not on the token: the
    // stream must wait for bob, not end.
    const made = await admin.addApp("bobnotes", ["note"]);
    const app = new SyncdClient({ addr: d.addr, token: made.token!, WebSocket: WS });
    const errors: SyncdError[] = [];
    let disconnects = 0;
    let signedIn: (() => void) | undefined;
    const waited = new Promise<void>((resolve) => (signedIn = resolve));
    let opened: (() => void) | undefined;
    const open = new Promise<void>((resolve) => (opened = resolve));
    const sub = app.subscribe({
      onOpen: () => opened?.(),
      account: "bob",
      entityType: "note",
      minDelayMs: 20,
      maxDelayMs: 100,
      onDisconnect: () => {
        if (++disconnects === 2) signedIn?.();
      },
      onError: (err) => {
        errors.push(err);
        signedIn?.(); // fail at the assertion below, not by hanging
      },
    });
    const it = sub[Symbol.asyncIterator]();
    await waited; // refused twice while alice is signed in, and still trying
    assert.deepEqual(errors, []);
    await admin.setSession("bob", "bob.dev");
    await open; // a stream with no `since` starts when it opens
    await admin.create("note", { title: "bob's" }, { id: "b1" });
    for (;;) {
      const r = await it.next();
      assert.equal(r.done, false);
      if (r.value.type === "entity.changed" && r.value.entityId === "b1") break;
    }
    assert.deepEqual(errors, []);
    sub.close();
    await admin.setSession("alice", "alice.dev");
    await admin.removeApp("bobnotes");
  });
});
