// Live queries: a list of entities kept current by the event stream.
//
// How it stays right: it reads the status's lastEventSeq S, subscribes to
// the entity events of its type from S, then reads the list; every
// entity event after S makes it read that entity again (an event says
// what changed, not to what). An entity read after its event is at least
// as new as the event, so the list after the last event is the daemon's
// list, whatever the order in which reads and events crossed. The stream
// resumes after the last event across reconnects (a daemon restart, a
// SIGKILL); a resync (the events asked for are gone, or the daemon's data
// was replaced) makes it read the whole list again, and so does a change
// of the account signed in (entities are the account's: another account,
// or none, is another list), which a second stream, of session events,
// shared by the client's live queries, tells. Signed out, the list is
// empty until an account signs in. While the daemon cannot be reached,
// reads are tried again with backoff.

import { SyncdError } from "./errors.js";
import type { SyncdClient } from "./index.js";
import type { Subscription } from "./events.js";
import type { Data, Entity, EventOf, SyncState } from "./types.js";

/**
 * The order of a live list: a field of the data (ascending), a field and
 * a direction, or a comparison of two entities. Ties, and entities
 * without the field (last), go by id.
 */
export type OrderBy<T, K extends string = string> =
  | (keyof T & string)
  | { field: keyof T & string; desc?: boolean }
  | ((a: Entity<T, K>, b: Entity<T, K>) => number);

export interface LiveOptions<T, K extends string = string> {
  /**
   * Only entities in this sync state: evaluated by the daemon (the list's
   * `syncState`). As in the list, "conflict" and "failed" include
   * entities deleted here whose delete waits for the user
   * (`deleted: true`); without it deleted entities are not listed.
   */
  syncState?: SyncState;
  /**
   * Only entities whose data has these top-level field values (compared
   * as JSON), or that a function accepts: evaluated by the client (the
   * local API has no field filter), over the daemon's list of the type.
   */
  filter?: Partial<T> | ((e: Entity<T, K>) => boolean);
  /** Default: by id, the daemon's order. */
  orderBy?: OrderBy<T, K>;
  /**
   * Only the entity with this id (useEntity): it is read with get, and
   * only its events are followed; the list is empty while it does not
   * exist (or is deleted, or fails the other filters).
   */
  id?: string;
  /** The callback form: called with the first result and after every change. */
  onChange?: (result: LiveResult<T, K>) => void;
  /** Called when the query ends for good (a revoked token, a type not granted); the iterator then throws it. */
  onError?: (err: unknown) => void;
  /** The first wait before reading again while the daemon is unreachable, and the longest (default 100, 5000 ms); also the stream's reconnect waits. */
  minDelayMs?: number;
  maxDelayMs?: number;
}

/** A live query's result: the list as of the event seq. */
export interface LiveResult<T, K extends string = string> {
  items: Entity<T, K>[];
  /** The seq of the last event the list reflects. */
  seq: number;
  /** initial: the first read; change: entity events; resync: the whole list read again (a resync event, or the account signed in changed). */
  reason: "initial" | "change" | "resync";
}

type EntityEvent = EventOf<"entity.">;
/** The account signed in changed (session.changed, session.logged_out, account.purged): read the whole list again. */
type SessionMark = { type: "session" };

const closedErr = new Error("syncd: live query closed");

/** A live query; see SyncdClient.live. */
export class LiveQuery<T = Data, K extends string = string> implements AsyncIterable<LiveResult<T, K>> {
  /** The latest result; undefined until the first read. */
  current: LiveResult<T, K> | undefined;
  private rows = new Map<string, Entity<T, K>>();
  private sub: Subscription<EntityEvent> | undefined;
  private events: (EntityEvent | SessionMark)[] = [];
  private unwatch: (() => void) | undefined;
  private ready = false;
  private working = false;
  private closed = false;
  private seq = 0;
  private lastShown = "";
  private results: LiveResult<T, K>[] = [];
  private waiters: ((r: IteratorResult<LiveResult<T, K>>) => void)[] = [];
  private rejecters: ((err: unknown) => void)[] = [];
  private failure: unknown;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly client: SyncdClient,
    readonly type: K,
    private readonly opts: LiveOptions<T, K>,
  ) {
    void this.start();
  }

  private async start(): Promise<void> {
    try {
      const st = await this.persist(() => this.client.status());
      if (this.closed) return; // closed between the answer and here
      this.seq = st.lastEventSeq;
      this.sub = this.client.subscribe({
        since: st.lastEventSeq,
        type: "entity.",
        entityType: this.type,
        minDelayMs: this.opts.minDelayMs,
        maxDelayMs: this.opts.maxDelayMs,
        onEvent: (e) => {
          if (this.opts.id !== undefined && e.type !== "resync" && e.entityId !== this.opts.id) return;
          this.events.push(e);
          void this.pump();
        },
        onError: (err) => this.fail(err),
      });
      this.unwatch = sessionWatch(this.client).add(st.lastEventSeq, () => {
        this.events.push({ type: "session" });
        void this.pump();
      }, this.opts);
      await this.persist(() => this.readAll());
      this.ready = true;
      this.emit("initial");
      await this.pump();
    } catch (err) {
      if (err !== closedErr) this.fail(err);
    }
  }

  /** Applies the events that came, in runs: one read per entity a run names, or the whole list after a resync. */
  private async pump(): Promise<void> {
    if (!this.ready || this.working) return;
    this.working = true;
    try {
      while (this.events.length > 0 && !this.closed) {
        const run = this.events.splice(0);
        let seq = this.seq;
        for (const e of run) if (e.type !== "session") seq = e.seq;
        if (run.some((e) => e.type === "resync" || e.type === "session")) {
          await this.persist(() => this.readAll());
          this.seq = seq;
          this.emit("resync");
          continue;
        }
        const ids = new Set<string>();
        for (const e of run) if (e.type !== "resync" && e.type !== "session") ids.add(e.entityId);
        for (const id of ids) await this.persist(() => this.readOne(id));
        this.seq = seq;
        this.emit("change");
      }
    } catch (err) {
      if (err !== closedErr) this.fail(err);
    } finally {
      this.working = false;
    }
  }

  private async readAll(): Promise<void> {
    if (this.opts.id !== undefined) {
      this.rows = new Map();
      await this.readOne(this.opts.id);
      return;
    }
    const rows = new Map<string, Entity<T, K>>();
    const q = this.opts.syncState === undefined ? {} : { syncState: this.opts.syncState };
    try {
      for await (const e of this.client.all(this.type, q)) {
        const en = e as unknown as Entity<T, K>;
        if (this.passes(en)) rows.set(en.id, en);
      }
    } catch (err) {
      if (!signedOut(err)) throw err;
      rows.clear(); // nobody signed in: nothing to list until a session event
    }
    this.rows = rows;
  }

  private async readOne(id: string): Promise<void> {
    let e: Entity<T, K>;
    try {
      e = (await this.client.get(this.type, id)) as unknown as Entity<T, K>;
    } catch (err) {
      if (err instanceof SyncdError && err.code === "not_found") {
        this.rows.delete(id);
        return;
      }
      if (signedOut(err)) {
        this.rows.clear();
        return;
      }
      throw err;
    }
    if (this.passes(e)) this.rows.set(id, e);
    else this.rows.delete(id);
  }

  private passes(e: Entity<T, K>): boolean {
    if (this.opts.syncState === undefined ? e.deleted === true : e.syncState !== this.opts.syncState) return false;
    const f = this.opts.filter;
    if (f === undefined) return true;
    if (typeof f === "function") return f(e);
    const data = (e.data ?? {}) as Record<string, unknown>;
    for (const [k, v] of Object.entries(f as Record<string, unknown>)) {
      if (JSON.stringify(data[k]) !== JSON.stringify(v)) return false;
    }
    return true;
  }

  private emit(reason: LiveResult<T, K>["reason"]): void {
    if (this.closed) return;
    const items = [...this.rows.values()].sort(compare(this.opts.orderBy));
    const shown = JSON.stringify(items);
    if (reason !== "initial" && shown === this.lastShown) return;
    this.lastShown = shown;
    const r: LiveResult<T, K> = { items, seq: this.seq, reason };
    this.current = r;
    this.opts.onChange?.(r);
    const w = this.waiters.shift();
    this.rejecters.shift();
    if (w) w({ value: r, done: false });
    else if (!this.opts.onChange) this.results.push(r);
  }

  /** Runs fn until it does not fail for want of the daemon (unreachable, shutting down), waiting longer each time. */
  private async persist<R>(fn: () => Promise<R>): Promise<R> {
    let delay = this.opts.minDelayMs ?? 100;
    for (;;) {
      if (this.closed) throw closedErr;
      try {
        const r = await fn();
        // Closed while it ran: go no further (no subscription opened
        // after close, no result emitted).
        if (this.closed) throw closedErr;
        return r;
      } catch (err) {
        if (err === closedErr) throw err;
        if (this.closed) throw closedErr;
        const transient = err instanceof SyncdError && (err.code === "daemon_unreachable" || err.code === "shutting_down");
        if (!transient) throw err;
      }
      await new Promise<void>((res) => {
        this.wake = res;
        this.timer = setTimeout(res, delay);
      });
      delay = Math.min(delay * 2, this.opts.maxDelayMs ?? 5000);
    }
  }

  private fail(err: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.failure = err;
    this.sub?.close();
    this.unwatch?.();
    this.opts.onError?.(err);
    this.waiters.splice(0);
    for (const r of this.rejecters.splice(0)) r(err);
  }

  /** Ends the query: the stream closes, the iterator finishes. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.sub?.close();
    this.unwatch?.();
    if (this.timer) clearTimeout(this.timer);
    this.wake?.();
    this.rejecters.splice(0);
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<LiveResult<T, K>> {
    return {
      next: () => {
        const r = this.results.shift();
        if (r) return Promise.resolve({ value: r, done: false });
        if (this.failure !== undefined) return Promise.reject(this.failure);
        if (this.closed) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve, reject) => {
          this.waiters.push(resolve);
          this.rejecters.push(reject);
        });
      },
      return: () => {
        this.close();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}

function signedOut(err: unknown): boolean {
  return err instanceof SyncdError && err.code === "no_session";
}

/**
 * One stream of session events (session.changed, session.logged_out,
 * account.purged) per client, shared by its live queries while any is
 * open: the entity stream of a query is filtered to its type, which
 * leaves out events of no entity type.
 */
class SessionWatch {
  private listeners = new Set<() => void>();
  private sub: Subscription | undefined;
  constructor(private readonly client: SyncdClient) {}

  /** Calls fn after each session event from `since` on (when it opens the stream) or from now; the answer removes it. */
  add(since: number, fn: () => void, delays: { minDelayMs?: number; maxDelayMs?: number }): () => void {
    this.listeners.add(fn);
    if (!this.sub) {
      this.sub = this.client.subscribe({
        since,
        type: ["session.", "account.purged"],
        minDelayMs: delays.minDelayMs,
        maxDelayMs: delays.maxDelayMs,
        onEvent: () => {
          for (const l of [...this.listeners]) l();
        },
        // A revoked token ends the queries' own streams too, and so them.
        onError: () => {},
      }) as unknown as Subscription;
    }
    let removed = false;
    return () => {
      if (removed) return;
      removed = true;
      this.listeners.delete(fn);
      if (this.listeners.size === 0) {
        this.sub?.close();
        this.sub = undefined;
      }
    };
  }
}

const sessionWatches = new WeakMap<SyncdClient, SessionWatch>();

function sessionWatch(client: SyncdClient): SessionWatch {
  let w = sessionWatches.get(client);
  if (!w) sessionWatches.set(client, (w = new SessionWatch(client)));
  return w;
}

/** The comparison of an OrderBy (ties by id). */
export function compare<T, K extends string>(o: OrderBy<T, K> | undefined): (a: Entity<T, K>, b: Entity<T, K>) => number {
  const byId = (a: Entity<T, K>, b: Entity<T, K>) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  if (o === undefined) return byId;
  if (typeof o === "function") return (a, b) => o(a, b) || byId(a, b);
  const field = typeof o === "string" ? o : o.field;
  const sign = typeof o === "object" && o.desc ? -1 : 1;
  return (a, b) => {
    const x = (a.data as Record<string, unknown> | null)?.[field];
    const y = (b.data as Record<string, unknown> | null)?.[field];
    if (x === undefined || x === null) return y === undefined || y === null ? byId(a, b) : 1;
    if (y === undefined || y === null) return -1;
    const c = (x as number | string) < (y as number | string) ? -1 : (x as number | string) > (y as number | string) ? 1 : 0;
    return sign * c || byId(a, b);
  };
}
