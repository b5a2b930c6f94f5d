// Must compile under strict tsc: the typed usage the README promises.
import { createClient, SyncdClient, SyncdError, type Entity, type SyncEvent } from "@syncd/client";
import { connect } from "@syncd/client/node";
import WebSocket from "ws";

interface Note {
  title: string;
  done?: boolean;
  tags?: string[];
  address?: { city: string; zip?: string };
}
interface Task {
  due: string;
  priority: number;
}

export async function typed(): Promise<void> {
  // The README's connect({ WebSocket }) with the ws package: no cast.
  const c = await connect<{ note: Note; task: Task }>({ WebSocket });
  const n = await c.create("note", { title: "Buy milk" }, { id: "n1" });
  const title: string | undefined = n.data?.title;
  const type: "note" = n.type;
  await c.update("note", "n1", { done: true, tags: null, address: { zip: "1000" } });
  const t = await c.get("task", "t1");
  const priority: number | undefined = t.data?.priority;
  for await (const e of c.all("note", { syncState: "conflict" })) {
    const city: string | undefined = e.data?.address?.city;
    void city;
  }
  await c.resolve("note", "n1", { data: { title: "merged" } });
  await c.batch([
    { op: "create", type: "task", id: "t2", data: { due: "2026-01-01", priority: 1 } },
    { op: "update", type: "note", id: "n1", data: { title: "x" } },
    { op: "delete", type: "note", id: "n1" },
  ]);
  void [title, type, priority];
}

export async function untyped(): Promise<void> {
  const c = new SyncdClient({ token: "t", WebSocket });
  const e = await c.get<Note>("note", "n1");
  const title: string | undefined = e.data?.title;
  const any: Entity = await c.get("anything", "x");
  void [title, any];
  const l = c.live<Note>("note", { syncState: "pending", filter: { done: false }, orderBy: { field: "title", desc: true } });
  for await (const r of l) {
    for (const row of r.items) void row.data?.title;
  }
  const typedLive = createClient<{ note: Note }>({ token: "t" }).live("note", { orderBy: "title", filter: (e) => e.data?.done === true });
  typedLive.close();
}

export async function errorsAndEvents(c: SyncdClient): Promise<void> {
  try {
    await c.get("note", "missing");
  } catch (err) {
    if (err instanceof SyncdError) {
      switch (err.code) {
        case "not_found":
        case "daemon_unreachable":
        case "token_revoked":
          break;
      }
    }
  }
  const sub = c.subscribe({ since: 0, type: ["entity.", "queue.totals"] });
  for await (const e of sub) {
    switch (e.type) {
      case "entity.changed": {
        const s: "pending" | "synced" | "failed" | "conflict" | "stale" = e.syncState;
        const paths: string[] | undefined = e.data?.conflictPaths;
        void [s, paths];
        break;
      }
      case "entity.removed":
        void e.entityId;
        break;
      case "queue.totals":
        void e.data.counts.pending;
        break;
      case "resync":
        void e.seq;
        break;
      default: {
        const never: never = e;
        void never;
      }
    }
  }
  const all = c.subscribe({ onEvent: (e: SyncEvent) => void (e.type === "connectivity.changed" && e.data.online) });
  all.close();
}
