import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createElement as h, StrictMode, useEffect } from "react";
import TestRenderer, { type ReactTestRenderer } from "react-test-renderer";
import WebSocket from "ws";
import { SyncdClient } from "../src/index.js";
import { SyncdProvider, useConflicts, useEntity, useList, useSyncStatus, type LiveEntity, type LiveList, type SyncStatus } from "../src/react.js";
import { startDaemon, startServer } from "./daemon.js";
import { assertStages, listStory } from "./story.js";
import { next, Recorder } from "./wait.js";

// The hooks rendered by React's test renderer (in StrictMode, which
// mounts, unmounts and mounts again) against real daemons: the same
// story as live.test.ts, seen through useList, useEntity, useConflicts
// and useSyncStatus; then what an unmount leaves behind.

interface Note {
  title: string;
}
type Schema = { note: Note; task: { invalid: boolean } };

interface View {
  list: LiveList<Note, "note">;
  n1: LiveEntity<Note>;
  conflicts: LiveList<Note>;
  status: SyncStatus;
}

const fast = { minDelayMs: 50, maxDelayMs: 500 };

/** All four hooks: the list by the client passed, the others by the provider's. */
function Notes(props: { client: SyncdClient<Schema>; onCommit: (v: View) => void }) {
  const list = useList(props.client, "note", { orderBy: "title", ...fast });
  const n1 = useEntity<Note>("note", "n1", fast);
  const conflicts = useConflicts<Note>("note", fast);
  const status = useSyncStatus(undefined, fast);
  // After each commit: what the screen shows.
  useEffect(() => props.onCommit({ list, n1, conflicts, status }));
  return h(
    "ul",
    null,
    list.items.map((e) => h("li", { key: e.id }, `${e.data?.title} (${e.syncState})`)),
  );
}

function mount(client: SyncdClient<Schema>, rec: Recorder<View>): ReactTestRenderer {
  return TestRenderer.create(h(StrictMode, null, h(SyncdProvider, { client }, h(Notes, { client, onCommit: rec.push }))));
}

/** The rendered list items' text. */
function shown(r: ReactTestRenderer): string[] {
  const ul = r.toJSON();
  assert.ok(ul && !Array.isArray(ul));
  return (ul.children ?? []).map((li) => (typeof li === "string" ? li : (li.children ?? []).join("")));
}

const row = (v: View, id: string) => v.list.items.find((e) => e.id === id);

// React's test renderer says once per create that it is deprecated (for
// react-dom and a DOM): that line is expected, any other console.error
// (a warning of React's: keys, an update on an unmounted component) fails.
const errors: string[] = [];
const consoleError = console.error;
before(() => {
  console.error = (...args: unknown[]) => {
    const text = args.map(String).join(" ");
    if (text.includes("react-test-renderer is deprecated")) return;
    errors.push(text);
    consoleError(...args);
  };
});
after(() => {
  console.error = consoleError;
});

describe("the React hooks against real daemons", () => {
  it("show a local write, a pulled change, a delete, a conflict and its resolution, across a SIGKILL and a resync", { timeout: 180000 }, async () => {
    const server = await startServer();
    let a = await startDaemon({ args: ["--remote", server.url, "--pull", "on"] });
    const b = await startDaemon({ args: ["--remote", server.url, "--pull", "on"] });
    const ca = new SyncdClient<Schema>({ addr: a.addr, token: a.token, WebSocket, retryDelayMs: 50 });
    const cb = new SyncdClient<{ note: Note }>({ addr: b.addr, token: b.token, WebSocket });
    await ca.setSession("alice", "alice.a");
    await cb.setSession("alice", "alice.b");
    // A's event log runs well ahead of a fresh daemon's (for the resync).
    for (let i = 0; i < 30; i++) await ca.create("task", { invalid: true }, { id: `t${i}` });

    const rec = new Recorder<View>();
    const r = mount(ca, rec);
    const bLive = cb.live("note")[Symbol.asyncIterator]();
    try {
      const first = await rec.until((v) => !v.list.loading && !v.n1.loading && !v.conflicts.loading && v.status.state === "online");
      assert.deepEqual(first.list.items, []);
      assert.equal(first.n1.entity, undefined);
      assert.equal(first.status.status?.accountId, "alice");

      // A local write: pending (or already synced), then synced.
      await ca.create("note", { title: "a-local" }, { id: "n1" });
      await ca.create("note", { title: "b-to-delete" }, { id: "n2" });
      const local = await rec.until((v) => v.list.items.length === 2);
      assert.deepEqual(local.list.items.map((e) => e.id), ["n1", "n2"], "ordered by title");
      const synced = await rec.until((v) => v.list.items.every((e) => e.syncState === "synced") && v.n1.entity?.syncState === "synced");
      assert.equal(synced.n1.entity?.data?.title, "a-local");
      assert.deepEqual(shown(r), ["a-local (synced)", "b-to-delete (synced)"]);
      await rec.until((v) => v.status.counts.pending === 0 && v.status.counts.sending === 0 && v.status.counts.done >= 2);

      // A change another device made, pulled.
      await next(bLive, "B pulled n1", (l) => l.items.some((e) => e.id === "n1"));
      await cb.update("note", "n1", { title: "c-remote" });
      const pulled = await rec.until((v) => row(v, "n1")?.data?.title === "c-remote" && v.n1.entity?.data?.title === "c-remote");
      assert.deepEqual(pulled.list.items.map((e) => e.id), ["n2", "n1"], "ordered again by the new title");
      assert.equal(pulled.n1.entity?.syncState, "synced");

      // A delete.
      await ca.delete("note", "n2");
      const deleted = await rec.until((v) => row(v, "n2") === undefined);
      assert.deepEqual(deleted.list.items.map((e) => e.id), ["n1"]);
      assert.deepEqual(shown(r), ["c-remote (synced)"]);

      // SIGKILL: the status says so; A comes back without pulling, so B's
      // next edit is news to it only when A's own edit is refused.
      await a.kill();
      await rec.until((v) => v.status.state === "unreachable");
      a = await startDaemon({ dataDir: a.dataDir, port: a.port, args: ["--remote", server.url, "--pull", "off"] });
      await rec.until((v) => v.status.state !== "unreachable");
      await next(bLive, "B has n1 synced", (l) => l.items.some((e) => e.id === "n1" && e.syncState === "synced"));
      await cb.update("note", "n1", { title: "d-from-b" });
      await next(bLive, "B's edit synced", (l) => l.items.some((e) => e.id === "n1" && e.data?.title === "d-from-b" && e.syncState === "synced"));
      await ca.update("note", "n1", { title: "e-from-a" });
      const conflict = await rec.until((v) => v.conflicts.items.length === 1 && v.n1.entity?.syncState === "conflict" && row(v, "n1")?.syncState === "conflict");
      assert.equal(conflict.conflicts.items[0]!.id, "n1");
      assert.deepEqual(conflict.n1.entity?.conflict?.paths.map((p) => [p.path, p.local, p.server]), [["/title", "e-from-a", "d-from-b"]]);
      assert.deepEqual(shown(r), ["e-from-a (conflict)"]);

      await ca.resolve("note", "n1", { paths: { "/title": "local" } });
      const resolved = await rec.until((v) => v.conflicts.items.length === 0 && v.n1.entity?.syncState === "synced" && row(v, "n1")?.syncState === "synced");
      assert.equal(resolved.n1.entity?.data?.title, "e-from-a");

      // A resync: A's data directory is replaced by another device's (n1
      // but not n3): the hooks must read again, never keep n3.
      const c2 = await startDaemon({ args: ["--remote", server.url, "--pull", "on"] });
      const cc2 = new SyncdClient<{ note: Note }>({ addr: c2.addr, token: c2.token, WebSocket });
      await cc2.setSession("alice", "alice.c");
      const c2Live = cc2.live("note")[Symbol.asyncIterator]();
      await next(c2Live, "the new device pulled n1", (l) => l.items.some((e) => e.id === "n1" && e.data?.title === "e-from-a"));
      await c2Live.return!();
      await c2.stop();
      await ca.create("note", { title: "f-only-on-a" }, { id: "n3" });
      await rec.until((v) => row(v, "n3") !== undefined);
      await a.stop();
      writeFileSync(join(c2.dataDir, "api-token"), a.token + "\n");
      a = await startDaemon({ dataDir: c2.dataDir, port: a.port, args: ["--remote", server.url, "--pull", "off"] });
      const resynced = await rec.until((v) => row(v, "n3") === undefined);
      assert.deepEqual(resynced.list.items.map((e) => [e.id, e.data?.title]), [["n1", "e-from-a"]]);
      assert.equal(resynced.n1.entity?.data?.title, "e-from-a");
      assert.deepEqual(shown(r), ["e-from-a (synced)"]);
      // And it goes on from there.
      await ca.create("note", { title: "g-after" }, { id: "n4" });
      await rec.until((v) => row(v, "n4")?.syncState === "synced");
      await rec.until((v) => v.status.state !== "unreachable");

      // In order, and never back, in every committed render: no deleted
      // row shown again, no older title, no conflict after its resolution,
      // no n3 after the resync.
      assertStages(rec.values, listStory((v: View) => v.list.items), (v) => v.list.items);
      // The results keep their identity between renders that change
      // nothing (the status may change: it carries the free disk space).
      const v = rec.latest()!;
      r.update(h(StrictMode, null, h(SyncdProvider, { client: ca }, h(Notes, { client: ca, onCommit: rec.push }))));
      const again = await rec.until((x) => x !== v);
      assert.equal(again.list, v.list);
      assert.equal(again.n1, v.n1);
      assert.equal(again.conflicts, v.conflicts);
      assert.deepEqual(errors, []);
    } finally {
      r.unmount();
      await bLive.return!();
      await a.stop();
      await b.stop();
      await server.stop();
    }
  });
  it("mounted before anyone signed in, show the list once an account does", { timeout: 60000 }, async () => {
    const d = await startDaemon();
    const c = new SyncdClient<Schema>({ addr: d.addr, token: d.token, WebSocket });
    const rec = new Recorder<View>();
    const r = mount(c, rec);
    try {
      const out = await rec.until((v) => !v.list.loading && v.status.state === "paused");
      assert.deepEqual(out.list.items, []);
      assert.equal(out.list.error, undefined, "signed out is an empty list, not an error");
      assert.equal(out.status.status?.pauseReason, "signed_out");
      await c.setSession("alice", "alice.1");
      await c.create("note", { title: "first" }, { id: "n1" });
      const v = await rec.until((x) => x.n1.entity?.syncState === "synced" && row(x, "n1")?.syncState === "synced" && x.status.state === "online");
      assert.equal(v.list.error, undefined);
      assert.deepEqual(shown(r), ["first (synced)"]);
      assert.deepEqual(errors, []);
    } finally {
      r.unmount();
      await d.stop();
    }
  });

  it("leave no socket, timer or request behind when unmounted, in StrictMode, the daemon up or down", { timeout: 120000 }, async () => {
    // Real sockets and timers, counted: a WebSocket class that is the ws
    // package's, a fetch that is the platform's, and setTimeout and
    // clearTimeout as they are, each watched.
    const sockets: WebSocket[] = [];
    let inflight = 0;
    const timers = new Set<unknown>();
    let changed = () => {};
    class Counted extends WebSocket {
      constructor(url: string, protocols?: string | string[], opts?: WebSocket.ClientOptions) {
        super(url, protocols, opts);
        sockets.push(this);
        this.on("close", () => changed());
      }
    }
    const counted: typeof fetch = async (input, init) => {
      inflight++;
      try {
        return await fetch(input, init);
      } finally {
        inflight--;
        changed();
      }
    };
    const realSet = globalThis.setTimeout;
    const realClear = globalThis.clearTimeout;
    globalThis.setTimeout = ((fn: (...a: unknown[]) => void, ms?: number, ...rest: unknown[]) => {
      const t = realSet(() => {
        timers.delete(t);
        fn(...rest);
        changed();
      }, ms);
      timers.add(t);
      return t;
    }) as typeof setTimeout;
    globalThis.clearTimeout = ((t: Parameters<typeof clearTimeout>[0]) => {
      timers.delete(t);
      realClear(t);
      changed();
    }) as typeof clearTimeout;
    const open = () => sockets.filter((s) => s.readyState !== WebSocket.CLOSED).length;
    /**
     * Resolves once nothing of the client's is left: every socket closed,
     * no request or timer pending. What leaks keeps it from resolving:
     * the test then fails at its timeout.
     */
    const quiet = () =>
      new Promise<void>((res) => {
        changed = () => {
          if (open() === 0 && inflight === 0 && timers.size === 0) res();
        };
        changed();
      });

    let d = await startDaemon();
    try {
      const c = new SyncdClient<Schema>({ addr: d.addr, token: d.token, WebSocket: Counted, fetch: counted });
      await c.setSession("alice", "alice.dev");
      await c.create("note", { title: "one" }, { id: "n1" });

      // Unmounted at its first commit, before a first read answered:
      // nothing opens after.
      const early = new Recorder<View>();
      const r0 = mount(c, early);
      const firstCommit = await early.until(() => true);
      assert.ok(firstCommit.list.loading && inflight > 0, "the first reads are on their way");
      // act makes the unmount happen now, not in a later task of React's
      // scheduler (by when the reads may have answered).
      const g = globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean };
      g.IS_REACT_ACT_ENVIRONMENT = true;
      TestRenderer.act(() => r0.unmount());
      g.IS_REACT_ACT_ENVIRONMENT = false;
      await quiet();
      sockets.splice(0);

      // Up: StrictMode mounts twice, yet each hook keeps one stream.
      const rec = new Recorder<View>();
      const r = mount(c, rec);
      await rec.until((v) => v.list.items.length === 1 && v.n1.entity !== undefined && !v.conflicts.loading && v.status.state !== undefined);
      // One event stream per hook (list, entity, conflicts, status), and
      // one of session events that the client's live queries share.
      const streams = 5;
      await new Promise<void>((res) => {
        changed = () => {
          if (sockets.filter((s) => s.readyState === WebSocket.OPEN).length === streams) res();
        };
        changed();
      });
      assert.equal(sockets.length, streams, "one event stream per hook, and the shared session stream");
      r.unmount();
      await quiet();
      assert.equal(sockets.length, streams, "none opened after the unmount");

      // Down: every hook is retrying (reads waiting to be sent again,
      // streams waiting to reconnect) when the component goes.
      await d.kill();
      const rec2 = new Recorder<View>();
      const r2 = mount(c, rec2);
      await rec2.until((v) => v.status.state === "unreachable");
      await new Promise<void>((res) => {
        changed = () => {
          if (sockets.length >= streams + 2) res(); // the status stream tried twice (the lists wait for a first read)
        };
        changed();
      });
      assert.ok(timers.size + inflight > 0, "retries are waiting, or on their way");
      r2.unmount();
      await quiet();
      const after = sockets.length;
      // Back up: still nothing of the unmounted hooks comes to life.
      d = await startDaemon({ dataDir: d.dataDir, port: d.port });
      await c.status();
      await quiet();
      assert.equal(sockets.length, after, "no stream reconnected after the unmount");
      assert.deepEqual(errors, []);
    } finally {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
      await d.stop();
    }
  });
});
