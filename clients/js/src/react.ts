// @syncd/client/react: React hooks over live queries and the event
// stream. Each hook keeps a store (a live query, or the status read
// again on events) that useSyncExternalStore subscribes to: opened by the
// first subscriber, closed when the last one leaves (so an unmounted
// component leaves no socket or timer behind), and a result object that
// changes only when the data does. react is an optional peer dependency:
// only this entry point imports it.

import { createContext, createElement, useContext, useMemo, useSyncExternalStore, type ReactNode } from "react";
import type { SyncdClient } from "./index.js";
import { compare, LiveQuery, type LiveOptions, type LiveResult, type OrderBy } from "./live.js";
import type { StatusState, StatusWatch, SyncStatus } from "./status.js";
import type { Data, Entity, EntityType, Schema, Status } from "./types.js";

// ---- the client in context ----

const ClientContext = createContext<SyncdClient<any> | null>(null);

export interface SyncdProviderProps {
  /** The client the hooks below use when they are not given one. */
  client: SyncdClient<any>;
  children?: ReactNode;
}

/** Makes `client` the one the hooks below it use: `<SyncdProvider client={c}>`. */
export function SyncdProvider(props: SyncdProviderProps): ReactNode {
  return createElement(ClientContext.Provider, { value: props.client }, props.children);
}

/**
 * The client of the nearest SyncdProvider, typed as you say:
 * `useSyncdClient<{ note: Note }>()`. Throws outside a provider.
 */
export function useSyncdClient<S extends Schema = Record<string, Data>>(): SyncdClient<S> {
  const c = useContext(ClientContext);
  if (!c) throw new Error("syncd: no client: put the component inside <SyncdProvider client={...}>, or pass the client to the hook");
  return c as SyncdClient<S>;
}

// ---- results ----

/** What useList and useConflicts give: the list now, kept by the event stream. */
export interface LiveList<T = Data, K extends string = string> {
  /** The entities, each with its syncState; empty until the first read. */
  items: Entity<T, K>[];
  /** True until the first read answered. */
  loading: boolean;
  /** The seq of the last event the list reflects (0 while loading). */
  seq: number;
  /**
   * Set when the query ended for good (the app's token was revoked, the
   * type is not granted): a SyncdError. A daemon that is down is not an
   * error: the list stays as it was and is read again when it is back;
   * nor is nobody signed in: the list is empty until an account is.
   */
  error: unknown;
}

/** What useEntity gives. */
export interface LiveEntity<T = Data, K extends string = string> {
  /** The entity; undefined while loading, when there is none (or it is deleted), or when no id was given. */
  entity: Entity<T, K> | undefined;
  loading: boolean;
  error: unknown;
}

/** The options of useList: those of live() without its callbacks. */
export type ListHookOptions<T, K extends string = string> = Pick<LiveOptions<T, K>, "syncState" | "filter" | "orderBy" | "minDelayMs" | "maxDelayMs">;

// ---- stores ----

interface Store<R> {
  subscribe(onChange: () => void): () => void;
  getSnapshot(): R;
}

/**
 * A store that runs something (open) while it has subscribers. Leaving is
 * put off to a microtask so that React's StrictMode, which subscribes,
 * unsubscribes and subscribes again in one go, keeps the same run instead
 * of opening a second socket.
 */
abstract class RunningStore<R> implements Store<R> {
  private listeners = new Set<() => void>();
  private running = false;
  constructor(protected snap: R) {}

  protected abstract open(): void;
  protected abstract shut(): void;

  protected set(r: R): void {
    this.snap = r;
    for (const l of [...this.listeners]) l();
  }

  subscribe = (onChange: () => void): (() => void) => {
    this.listeners.add(onChange);
    if (!this.running) {
      this.running = true;
      this.open();
    }
    return () => {
      this.listeners.delete(onChange);
      queueMicrotask(() => {
        if (this.listeners.size === 0 && this.running) {
          this.running = false;
          this.shut();
        }
      });
    };
  };

  getSnapshot = (): R => this.snap;
}

const noItems: never[] = [];

/** A live query's result as a store: LiveList, replaced at each result. */
class ListStore<T, K extends string> extends RunningStore<LiveList<T, K>> {
  constructor(
    private readonly client: SyncdClient,
    private readonly types: K[],
    private readonly opts: LiveOptions<T, K>,
  ) {
    super({ items: noItems, loading: true, seq: 0, error: undefined });
  }

  private queries: LiveQuery<T, K>[] = [];
  private results: (LiveResult<T, K> | undefined)[] = [];

  protected open(): void {
    this.results = this.types.map(() => undefined);
    const live = this.client.live.bind(this.client) as (type: string, o: LiveOptions<T, K>) => LiveQuery<T, K>;
    this.queries = this.types.map((type, i) =>
      live(type, {
        ...this.opts,
        onChange: (r) => {
          this.results[i] = r as LiveResult<T, K>;
          this.publish();
        },
        onError: (err) => this.set({ ...this.snap, loading: false, error: err }),
      }),
    );
  }

  private publish(): void {
    if (this.results.some((r) => r === undefined)) return;
    const rs = this.results as LiveResult<T, K>[];
    const items = rs.length === 1 ? rs[0]!.items : rs.flatMap((r) => r.items);
    this.set({ items, loading: false, seq: Math.max(...rs.map((r) => r.seq)), error: undefined });
  }

  protected shut(): void {
    for (const q of this.queries) q.close();
    this.queries = [];
  }
}

/** A StatusWatch while the store has subscribers. */
class StatusStore extends RunningStore<SyncStatus> {
  private watch: StatusWatch | undefined;

  constructor(private readonly client: SyncdClient, private readonly delays: { minDelayMs?: number; maxDelayMs?: number }) {
    super({ state: undefined, loading: true, status: undefined, counts: { pending: 0, sending: 0, retry_waiting: 0, permanent_failed: 0, done: 0 }, error: undefined });
  }

  protected open(): void {
    this.watch = this.client.watchStatus({ ...this.delays, onChange: (s) => this.set(s) });
  }

  protected shut(): void {
    this.watch?.close();
    this.watch = undefined;
  }
}

const idle: LiveEntity<never, never> = { entity: undefined, loading: false, error: undefined };
const idleStore: Store<LiveEntity<never, never>> = { subscribe: () => () => {}, getSnapshot: () => idle };

// ---- hooks ----

type AnyClient = SyncdClient<Schema>;

/** The client passed first, else the provider's; and the arguments after it. */
function useClientArgs<A extends unknown[]>(args: unknown[]): [AnyClient, ...A] {
  const fromContext = useContext(ClientContext);
  if (typeof args[0] === "string" || Array.isArray(args[0])) {
    if (!fromContext) throw new Error("syncd: no client: put the component inside <SyncdProvider client={...}>, or pass the client to the hook");
    return [fromContext as AnyClient, ...(args as A)];
  }
  return args as [AnyClient, ...A];
}

/** What of the options makes another query: all but functions, which the hook applies itself. */
function queryKey(parts: Record<string, unknown>): string {
  return JSON.stringify(parts, (_k, v: unknown) => (typeof v === "function" ? undefined : v));
}

/**
 * Applies a function filter or orderBy to a store's items, at render,
 * again only when one of them changes: pass stable functions (useCallback)
 * to keep the result's identity between renders.
 */
function useApplied<T, K extends string>(r: LiveList<T, K>, opts: ListHookOptions<T, K>): LiveList<T, K> {
  const f = typeof opts.filter === "function" ? opts.filter : undefined;
  const o = typeof opts.orderBy === "function" ? opts.orderBy : undefined;
  return useMemo(() => {
    if (!f && !o) return r;
    let items = f ? r.items.filter(f) : r.items;
    if (o) items = [...items].sort(compare<T, K>(o));
    return { ...r, items };
  }, [r, f, o]);
}

/**
 * The entities of `type` now and after every change: a live query
 * (SyncdClient.live) for the component's lifetime. `syncState` is
 * filtered by the daemon, `filter` (field values, or a function) and
 * `orderBy` by the client. With the client first it is typed by the
 * client's schema: `useList(client, "note", { orderBy: "title" })`; else
 * it uses the SyncdProvider's client and `useList<Note>("note")` names the
 * data's type.
 */
export function useList<S extends Schema, K extends EntityType<S>>(client: SyncdClient<S>, type: K, opts?: ListHookOptions<S[K], K>): LiveList<S[K], K>;
export function useList<T extends object = Data>(type: string, opts?: ListHookOptions<T>): LiveList<T>;
export function useList(...args: unknown[]): LiveList<Data> {
  const [client, type, opts = {}] = useClientArgs<[string, ListHookOptions<Data>?]>(args);
  return useLive(client, [type], opts);
}

/**
 * The entities in conflict (syncState "conflict", deleted ones included):
 * of one type, or of several (`["note", "task"]`, listed by type then by
 * the order asked). Resolve them with client.resolve; each leaves the
 * list when it is settled.
 */
export function useConflicts<S extends Schema, K extends EntityType<S>>(
  client: SyncdClient<S>,
  type: K | readonly K[],
  opts?: Omit<ListHookOptions<S[K], K>, "syncState">,
): LiveList<S[K], K>;
export function useConflicts<T extends object = Data>(type: string | readonly string[], opts?: Omit<ListHookOptions<T>, "syncState">): LiveList<T>;
export function useConflicts(...args: unknown[]): LiveList<Data> {
  const [client, type, opts = {}] = useClientArgs<[string | readonly string[], ListHookOptions<Data>?]>(args);
  const types = typeof type === "string" ? [type] : [...type];
  return useLive(client, types, { ...opts, syncState: "conflict" });
}

function useLive(client: AnyClient, types: string[], opts: ListHookOptions<Data>): LiveList<Data> {
  const { syncState, filter, orderBy, minDelayMs, maxDelayMs } = opts;
  const key = queryKey({ types, syncState, filter, orderBy, minDelayMs, maxDelayMs });
  const store = useMemo(() => {
    const o: LiveOptions<Data> = { minDelayMs, maxDelayMs };
    if (syncState !== undefined) o.syncState = syncState;
    if (filter !== undefined && typeof filter !== "function") o.filter = filter;
    if (orderBy !== undefined && typeof orderBy !== "function") o.orderBy = orderBy;
    return new ListStore<Data, string>(client as unknown as SyncdClient, types, o);
    // The key stands for the options' values.
  }, [client, key]);
  const r = useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
  return useApplied(r, opts);
}

/**
 * One entity now and after every change (a live query of that id):
 * undefined while it does not exist or is deleted. `id` may be null or
 * undefined (nothing selected): no query then.
 */
export function useEntity<S extends Schema, K extends EntityType<S>>(client: SyncdClient<S>, type: K, id: string | null | undefined, opts?: Pick<LiveOptions<S[K], K>, "minDelayMs" | "maxDelayMs">): LiveEntity<S[K], K>;
export function useEntity<T extends object = Data>(type: string, id: string | null | undefined, opts?: Pick<LiveOptions<T>, "minDelayMs" | "maxDelayMs">): LiveEntity<T>;
export function useEntity(...args: unknown[]): LiveEntity<Data> {
  const [client, type, id, opts = {}] = useClientArgs<[string, string | null | undefined, Pick<LiveOptions<Data>, "minDelayMs" | "maxDelayMs">?]>(args);
  const { minDelayMs, maxDelayMs } = opts;
  const store = useMemo(
    () => (id == null ? undefined : new ListStore<Data, string>(client as unknown as SyncdClient, [type], { id, minDelayMs, maxDelayMs })),
    [client, type, id, minDelayMs, maxDelayMs],
  );
  const s = store ?? (idleStore as unknown as Store<LiveList<Data>>);
  const r = useSyncExternalStore(s.subscribe, s.getSnapshot, s.getSnapshot);
  return useMemo(
    () => (store === undefined ? (idle as LiveEntity<Data>) : { entity: r.items[0], loading: r.loading, error: r.error }),
    [store, r],
  );
}

/**
 * The daemon's sync state and counts (`state`: online, offline, paused,
 * unreachable), read again on each event that may change them and when
 * the daemon comes back after a restart.
 */
export function useSyncStatus<S extends Schema>(client?: SyncdClient<S>, opts: { minDelayMs?: number; maxDelayMs?: number } = {}): SyncStatus {
  const fromContext = useContext(ClientContext);
  const c = client ?? fromContext;
  if (!c) throw new Error("syncd: no client: put the component inside <SyncdProvider client={...}>, or pass the client to the hook");
  const { minDelayMs, maxDelayMs } = opts;
  const store = useMemo(() => new StatusStore(c as unknown as SyncdClient, { minDelayMs, maxDelayMs }), [c, minDelayMs, maxDelayMs]);
  return useSyncExternalStore(store.subscribe, store.getSnapshot, store.getSnapshot);
}

export type { Entity, LiveResult, OrderBy, Status, StatusState, SyncStatus };
