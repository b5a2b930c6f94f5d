// @syncd/client: the local API of syncd for TypeScript and JavaScript
// apps (Electron, Tauri's webview, Node). No runtime dependency: fetch
// and WebSocket are the platform's (Node 22+ has both; on Node 20 pass
// the `ws` package's WebSocket, or use connect() from @syncd/client/node,
// which loads it).

import { neverSent, SyncdError, toError, unreachable } from "./errors.js";
import { Subscription, type Dialer, type SubscribeOptions, type WebSocketConstructor } from "./events.js";
import { LiveQuery, type LiveOptions } from "./live.js";
import { StatusWatch, type StatusWatchOptions } from "./status.js";
import type {
  AnySchema, App, BatchWrite, Data, Entity, EntityType, EventFilter, EventOf, List, MergePatch, Operation,
  OperationState, Resolution, Schema, Side, Status, SyncState, Version,
} from "./types.js";
export * from "./types.js";
export { SyncdError, type SyncdErrorCode } from "./errors.js";
export { CLOSE_REVOKED, Subscription, type SubscribeOptions, type WebSocketConstructor, type WebSocketLike } from "./events.js";
export { LiveQuery, type LiveOptions, type LiveResult, type OrderBy } from "./live.js";
export { StatusWatch, type StatusState, type StatusWatchOptions, type SyncStatus } from "./status.js";

export interface ClientOptions {
  /** The daemon's address, host:port (default 127.0.0.1:7419), or a base URL. */
  addr?: string;
  /**
   * Node only: reach the daemon over its Unix socket at this path instead
   * of TCP. Requests then need a fetch that dials it, and subscribe a
   * WebSocket that does: pass `unixFetch(socketPath)` and
   * `unixWebSocket(WebSocket, socketPath)` from `@syncd/client/node`
   * (`connect()` does both).
   */
  socketPath?: string;
  /**
   * The API token: an app token (from `syncd apps add`, scoped to the
   * app's entity types), or the admin token (the data directory's
   * api-token file), which opens everything.
   */
  token: string;
  /** fetch to use (default the global one). */
  fetch?: typeof fetch;
  /**
   * WebSocket constructor for subscribe and live (default the global one:
   * browsers, Electron's renderer, Node 22+). On Node 20, pass the `ws`
   * package's: `import WebSocket from "ws"`.
   */
  WebSocket?: WebSocketConstructor;
  /**
   * Pass the token in the WebSocket subprotocol (a browser's WebSocket
   * cannot set an Authorization header). Default: true with the global
   * WebSocket or in a page, false with one passed in elsewhere (the
   * header is sent through the `ws` options).
   */
  tokenInSubprotocol?: boolean;
  /** How many times a request is sent again after the daemon could not be reached (default 4). */
  retries?: number;
  /** The first wait before such a retry, doubled each time (default 200 ms). */
  retryDelayMs?: number;
}

export interface WriteOptions {
  /** The write's Idempotency-Key; made with crypto.randomUUID() when absent. */
  idempotencyKey?: string;
}

export interface ListOptions {
  limit?: number;
  after?: string;
  /** Only entities in this sync state (evaluated by the daemon). */
  syncState?: SyncState;
}

export interface OperationListOptions {
  limit?: number;
  after?: string;
  state?: OperationState;
  account?: string;
}

const DEFAULT_ADDR = "127.0.0.1:7419";

/**
 * A client whose entity types are typed by S:
 * `createClient<{ note: Note; task: Task }>({ token })`. The same as
 * `new SyncdClient<S>(opts)`.
 */
export function createClient<S extends Schema = AnySchema>(opts: ClientOptions): SyncdClient<S> {
  return new SyncdClient<S>(opts);
}

/**
 * The local API client. S maps each entity type to its data's type (see
 * createClient); without it any type and any JSON object go, and a read
 * can name its data's type: `get<Note>("note", id)`. The types are
 * promises about the data, not checks: syncd stores what apps write.
 */
export class SyncdClient<S extends Schema = AnySchema> {
  readonly baseURL: string;
  private readonly token: string;
  private readonly fetchFn: typeof fetch;
  private readonly WS: WebSocketConstructor | undefined;
  private readonly tokenInSubprotocol: boolean;
  private readonly retries: number;
  private readonly retryDelayMs: number;

  constructor(opts: ClientOptions) {
    if (!opts.token) throw new TypeError("syncd: a token is required (an app token, or the data directory's api-token)");
    if (opts.socketPath !== undefined && !opts.fetch) {
      throw new TypeError("syncd: socketPath needs a fetch that dials it: pass unixFetch(socketPath) from @syncd/client/node, or use connect()");
    }
    const addr = opts.socketPath !== undefined ? "localhost" : (opts.addr ?? DEFAULT_ADDR);
    this.baseURL = (/^https?:\/\//.test(addr) ? addr : "http://" + addr).replace(/\/+$/, "");
    this.token = opts.token;
    const f = opts.fetch ?? globalThis.fetch;
    if (!f) throw new TypeError("syncd: no fetch in this runtime; pass one as fetch");
    this.fetchFn = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    const globalWS = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    this.WS = opts.WebSocket ?? globalWS;
    const inPage = typeof (globalThis as { document?: unknown }).document !== "undefined";
    this.tokenInSubprotocol = opts.tokenInSubprotocol ?? (inPage || (this.WS !== undefined && this.WS === globalWS));
    this.retries = opts.retries ?? 4;
    this.retryDelayMs = opts.retryDelayMs ?? 200;
  }

  // ---- session ----

  /** Signs accountId in with its access token for the app's server. */
  async setSession(accountId: string, accessToken: string): Promise<void> {
    // PUT: sending it twice sets the same session.
    await this.request("PUT", "/v1/session", { body: { accountId, accessToken }, retrySafe: true });
  }

  /** Signs out; policy "purge" also deletes the account's data. */
  async logout(policy: "keep" | "purge" = "keep", force = false): Promise<{ purged: number }> {
    const q = new URLSearchParams({ policy });
    if (force) q.set("force", "true");
    return (await this.request("DELETE", "/v1/session?" + q.toString())) as { purged: number };
  }

  /** The daemon's status. */
  async status(): Promise<Status> {
    return (await this.request("GET", "/v1/status")) as Status;
  }

  // ---- entities ----

  /**
   * Creates an entity. The Idempotency-Key is fixed now, before the first
   * send: a retry of this call after the daemon could not be reached
   * sends the same key, and the daemon holds one operation.
   */
  async create<K extends EntityType<S>>(type: K, data: S[K], opts: WriteOptions & { id?: string } = {}): Promise<Entity<S[K], K>> {
    const body: Record<string, unknown> = { data };
    if (opts.id !== undefined) body.id = opts.id;
    return (await this.request("POST", "/v1/entities/" + seg(type), { body, key: opts.idempotencyKey ?? newKey() })) as Entity<S[K], K>;
  }

  /** Updates an entity with an RFC 7396 merge patch (null removes a field). */
  async update<K extends EntityType<S>>(type: K, id: string, patch: MergePatch<S[K]>, opts: WriteOptions = {}): Promise<Entity<S[K], K>> {
    return (await this.request("PATCH", `/v1/entities/${seg(type)}/${seg(id)}`, {
      body: { data: patch },
      key: opts.idempotencyKey ?? newKey(),
    })) as Entity<S[K], K>;
  }

  /** Deletes an entity. */
  async delete<K extends EntityType<S>>(type: K, id: string, opts: WriteOptions = {}): Promise<Entity<S[K], K>> {
    return (await this.request("DELETE", `/v1/entities/${seg(type)}/${seg(id)}`, { key: opts.idempotencyKey ?? newKey() })) as Entity<S[K], K>;
  }

  /** The entity; `get<Note>("note", id)` names its data's type where the client has no schema. */
  get<K extends EntityType<S>>(type: K, id: string): Promise<Entity<S[K], K>>;
  get<T extends object>(type: EntityType<S>, id: string): Promise<Entity<T>>;
  async get(type: string, id: string): Promise<Entity<unknown>> {
    return (await this.request("GET", `/v1/entities/${seg(type)}/${seg(id)}`)) as Entity<unknown>;
  }

  /** One page of entities; pass `next` as `after` for the next. */
  list<K extends EntityType<S>>(type: K, opts?: ListOptions): Promise<List<Entity<S[K], K>>>;
  list<T extends object>(type: EntityType<S>, opts?: ListOptions): Promise<List<Entity<T>>>;
  async list(type: string, opts: ListOptions = {}): Promise<List<Entity<unknown>>> {
    return (await this.request("GET", `/v1/entities/${seg(type)}` + query(opts))) as List<Entity<unknown>>;
  }

  /** Every entity of a type, page by page. */
  all<K extends EntityType<S>>(type: K, opts?: Omit<ListOptions, "after">): AsyncGenerator<Entity<S[K], K>>;
  all<T extends object>(type: EntityType<S>, opts?: Omit<ListOptions, "after">): AsyncGenerator<Entity<T>>;
  async *all(type: string, opts: Omit<ListOptions, "after"> = {}): AsyncGenerator<Entity<unknown>> {
    let after = "";
    for (;;) {
      const page = (await this.request("GET", `/v1/entities/${seg(type)}` + query({ ...opts, after }))) as List<Entity<unknown>>;
      yield* page.items;
      if (!page.next) return;
      after = page.next;
    }
  }

  /**
   * Settles an entity in conflict: `take` the server's record or this
   * device's changes whole (`resolve(type, id, "server")` is short for
   * `{ take: "server" }`), pick a side per field in conflict (`{ paths:
   * { "/title": "local", "/done": "server" } }`), or give the merged data
   * (`{ data }`). What keeps something of this device goes out as a new
   * operation on the server's current version: the answer's
   * `operationId`; `removed` says the entity left the store. Fails with
   * no_conflict (409), or invalid_request (400) for a side missing or
   * given for a field not in conflict.
   */
  async resolve<K extends EntityType<S>>(type: K, id: string, resolution: Side | Resolution<S[K]>): Promise<Entity<S[K], K>> {
    const body = typeof resolution === "string" ? { take: resolution } : resolution;
    return (await this.request("POST", `/v1/entities/${seg(type)}/${seg(id)}/resolve`, { body })) as Entity<S[K], K>;
  }

  /**
   * The versions the server keeps of the entity's record, newest first,
   * read from the server at each call: an edit overwritten or resolved
   * away can be found there and written again. Fails with not_on_server
   * (409: its create is not answered yet), versions_unsupported (501) or
   * remote_unavailable (503).
   */
  async versions<K extends EntityType<S>>(type: K, id: string): Promise<Version<S[K]>[]> {
    return ((await this.request("GET", `/v1/entities/${seg(type)}/${seg(id)}/versions`)) as { items: Version<S[K]>[] }).items;
  }

  /**
   * Reads the entity's record from the server again and settles the local
   * entity with it; `removed` is set when the server holds nothing under
   * the id. Fails with remote_unavailable (503) or refresh_unsupported (501).
   */
  async refresh<K extends EntityType<S>>(type: K, id: string): Promise<Entity<S[K], K>> {
    return (await this.request("POST", `/v1/entities/${seg(type)}/${seg(id)}/refresh`)) as Entity<S[K], K>;
  }

  /**
   * Makes every write in ONE transaction: all of them or, when one is
   * refused, none (the SyncdError's index names it). Each write without
   * an idempotencyKey gets one now, so a retry replays.
   */
  async batch(writes: BatchWrite<S>[], opts: { ordered?: boolean } = {}): Promise<Entity<S[EntityType<S>]>[]> {
    const ws = writes.map((w) => ({ ...w, idempotencyKey: w.idempotencyKey ?? newKey() }));
    const body: Record<string, unknown> = { writes: ws };
    if (opts.ordered) body.ordered = true;
    const ans = (await this.request("POST", "/v1/batch", { body, retrySafe: true })) as { results: Entity<S[EntityType<S>]>[] };
    return ans.results;
  }

  // ---- operations ----

  async operations(opts: OperationListOptions = {}): Promise<List<Operation>> {
    return (await this.request("GET", "/v1/operations" + query(opts))) as List<Operation>;
  }

  async operation(id: string): Promise<Operation> {
    return (await this.request("GET", "/v1/operations/" + seg(id))) as Operation;
  }

  /** Sends a permanently failed operation again. */
  async retry(id: string): Promise<Operation> {
    return (await this.request("POST", `/v1/operations/${seg(id)}/retry`)) as Operation;
  }

  /** Drops a permanently failed operation. */
  async discard(id: string): Promise<void> {
    await this.request("POST", `/v1/operations/${seg(id)}/discard`);
  }

  // ---- apps (admin token only) ----

  /**
   * Registers an app and returns it with its token, shown this once
   * (syncd keeps only its digest). The app's token reads, and unless
   * readOnly writes, only the given entity types.
   */
  async addApp(name: string, types: EntityType<S>[], opts: { readOnly?: boolean } = {}): Promise<App> {
    return (await this.request("POST", "/v1/apps", { body: { name, types, readOnly: opts.readOnly ?? false } })) as App;
  }

  /** The registered apps, without tokens. */
  async apps(): Promise<App[]> {
    return ((await this.request("GET", "/v1/apps")) as List<App>).items;
  }

  /** Removes an app: its token is refused from the next request on, and its event streams end. */
  async removeApp(name: string): Promise<void> {
    await this.request("DELETE", "/v1/apps/" + seg(name));
  }

  // ---- events ----

  /**
   * Subscribes to the event stream from `since` (the seq of the last
   * event you handled; absent: from now). It reconnects by itself with
   * backoff, resuming after the last event it delivered, so no event is
   * lost or repeated across a daemon restart; a `resync` event says the
   * events asked for are gone: re-read your state. Iterate it, or pass
   * onEvent; close() ends it. The events are a union narrowed by `type`;
   * a `type` filter narrows it to those types (and resync).
   */
  subscribe<F extends EventFilter = EventFilter>(opts: SubscribeOptions<F, EntityType<S>> = {}): Subscription<EventOf<F>> {
    return new Subscription<EventOf<F>>(this.dialer(), opts as unknown as SubscribeOptions<EventFilter>);
  }

  /**
   * A live query: the entities of `type` that pass `syncState` (the
   * daemon's filter) and `filter` (the client's), in `orderBy` order, now
   * and after every change, kept by the event stream across reconnects
   * and re-read on a resync. Iterate it, or pass onChange; close() ends it.
   */
  live<K extends EntityType<S>>(type: K, opts?: LiveOptions<S[K], K>): LiveQuery<S[K], K>;
  live<T extends object>(type: EntityType<S>, opts?: LiveOptions<T>): LiveQuery<T>;
  live(type: string, opts: object = {}): unknown {
    return new LiveQuery<Data>(this as unknown as SyncdClient, type, opts as LiveOptions<Data>);
  }

  /**
   * The daemon's sync state (online, offline, paused, unreachable) and
   * counts, kept current: read at once, again on each event that may
   * change it, and when the daemon is back after a restart. `current` is
   * the latest; onChange is called with each; close() ends it.
   */
  watchStatus(opts: StatusWatchOptions = {}): StatusWatch {
    return new StatusWatch(this as unknown as SyncdClient, opts);
  }

  private dialer(): Dialer {
    if (!this.WS) {
      throw new TypeError("syncd: no WebSocket in this runtime; pass one as WebSocket (on Node 20: the ws package's, or use connect() from @syncd/client/node)");
    }
    return {
      wsBase: this.baseURL.replace(/^http/, "ws"),
      token: this.token,
      WS: this.WS,
      tokenInSubprotocol: this.tokenInSubprotocol,
      whyRefused: (url) => this.whyRefused(url),
    };
  }

  /**
   * The same GET as a failed handshake, without the upgrade: the daemon
   * checks the token and the filter first, and answers 426 when all that
   * passes. A 4xx other than that (and 429) is a refusal that no retry
   * changes; anything else, or no answer, is not. The one exception is
   * account_not_granted: it depends on who is signed in, not on the
   * token, so the stream waits for that account's sign-in and reconnects.
   */
  private async whyRefused(wsURL: string): Promise<SyncdError | undefined> {
    const res = await this.fetchFn(wsURL.replace(/^ws/, "http"), {
      method: "GET",
      headers: { Authorization: "Bearer " + this.token, Accept: "application/json" },
    });
    const text = await res.text();
    if (res.status < 400 || res.status >= 500 || res.status === 426 || res.status === 429) return undefined;
    const err = toError(res.status, text);
    return err.code === "account_not_granted" ? undefined : err;
  }

  // ---- transport ----

  private async request(
    method: string,
    path: string,
    o: { body?: unknown; key?: string; retrySafe?: boolean } = {},
  ): Promise<unknown> {
    const headers: Record<string, string> = { Authorization: "Bearer " + this.token, Accept: "application/json" };
    let payload: string | undefined;
    if (o.body !== undefined) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(o.body);
    }
    if (o.key) headers["Idempotency-Key"] = o.key;
    // Resending is safe for reads, and for writes that carry their key
    // (the daemon answers a repeated key with the first answer); any
    // request can be sent again when the first never left (refused).
    const resend = method === "GET" || o.key !== undefined || o.retrySafe === true;
    let delay = this.retryDelayMs;
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await this.fetchFn(this.baseURL + path, { method, headers, body: payload });
      } catch (err) {
        // Not reached (connection refused while the service restarts,
        // reset): send again, the same key.
        if (!(resend || neverSent(err)) || attempt >= this.retries) throw unreachable(this.baseURL, attempt + 1, err);
        await sleep(delay);
        delay *= 2;
        continue;
      }
      let text: string;
      try {
        text = await res.text();
      } catch (err) {
        // The connection broke in the answer: the request was made.
        if (!resend || attempt >= this.retries) throw unreachable(this.baseURL, attempt + 1, err);
        await sleep(delay);
        delay *= 2;
        continue;
      }
      if (res.status === 503 && resend && attempt < this.retries && text.includes('"shutting_down"')) {
        await sleep(delay);
        delay *= 2;
        continue;
      }
      if (!res.ok) throw toError(res.status, text);
      try {
        return text ? JSON.parse(text) : undefined;
      } catch {
        throw new SyncdError(res.status, "unexpected_response", `syncd: an answer that is not JSON (HTTP ${res.status}): ${text.slice(0, 200)}`);
      }
    }
  }
}

function seg(s: string): string {
  return encodeURIComponent(s);
}

function query(o: object): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(o) as [string, unknown][]) if (v !== undefined && v !== "") q.set(k, String(v));
  return q.size ? "?" + q.toString() : "";
}

function newKey(): string {
  return globalThis.crypto.randomUUID();
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
