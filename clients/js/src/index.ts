// @syncd/client: the local API of syncd for TypeScript and JavaScript
// apps (Electron, Tauri's webview, Node). No runtime dependency in a
// browser or an Electron renderer (fetch and WebSocket); on Node 20,
// which has fetch but no global WebSocket, pass one (the `ws` package's)
// as `WebSocket`.

import type { App, BatchWrite, Entity, List, Operation, Resolution, Side, Status, SyncEvent, Version } from "./types.js";
export * from "./types.js";

/** An error answer of the local API. `code` is stable: switch on it. */
export class SyncdError extends Error {
  readonly status: number;
  readonly code: string;
  /** The refused write of a batch; -1 otherwise. */
  readonly index: number;
  constructor(status: number, code: string, message: string, index = -1) {
    super(message);
    this.name = "SyncdError";
    this.status = status;
    this.code = code;
    this.index = index;
  }
}

/** A WebSocket constructor: the browser's, or the `ws` package's on Node. */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

export interface WebSocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  close(code?: number, reason?: string): void;
}

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
  /** WebSocket constructor for subscribe (default the global one). */
  WebSocket?: WebSocketConstructor;
  /**
   * Pass the token in the WebSocket subprotocol (a browser cannot set an
   * Authorization header on a WebSocket). Default: true in a browser,
   * false elsewhere (the header is sent through the `ws` options).
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
  syncState?: string;
}

export interface OperationListOptions {
  limit?: number;
  after?: string;
  state?: string;
  account?: string;
}

const DEFAULT_ADDR = "127.0.0.1:7419";

/** The close code of an event stream whose app token was revoked. */
export const CLOSE_REVOKED = 4401;

/** The local API client. */
export class SyncdClient {
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
    this.fetchFn = f.bind(globalThis);
    this.WS = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    this.tokenInSubprotocol = opts.tokenInSubprotocol ?? typeof (globalThis as { document?: unknown }).document !== "undefined";
    this.retries = opts.retries ?? 4;
    this.retryDelayMs = opts.retryDelayMs ?? 200;
  }

  // ---- session ----

  /** Signs accountId in with its access token for the app's server. */
  async setSession(accountId: string, accessToken: string): Promise<void> {
    await this.request("PUT", "/v1/session", { body: { accountId, accessToken } });
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
  async create(type: string, data: Record<string, unknown>, opts: WriteOptions & { id?: string } = {}): Promise<Entity> {
    const body: Record<string, unknown> = { data };
    if (opts.id !== undefined) body.id = opts.id;
    return (await this.request("POST", "/v1/entities/" + seg(type), { body, key: opts.idempotencyKey ?? newKey() })) as Entity;
  }

  /** Updates an entity with an RFC 7396 merge patch. */
  async update(type: string, id: string, patch: Record<string, unknown>, opts: WriteOptions = {}): Promise<Entity> {
    return (await this.request("PATCH", `/v1/entities/${seg(type)}/${seg(id)}`, {
      body: { data: patch },
      key: opts.idempotencyKey ?? newKey(),
    })) as Entity;
  }

  /** Deletes an entity. */
  async delete(type: string, id: string, opts: WriteOptions = {}): Promise<Entity> {
    return (await this.request("DELETE", `/v1/entities/${seg(type)}/${seg(id)}`, { key: opts.idempotencyKey ?? newKey() })) as Entity;
  }

  async get(type: string, id: string): Promise<Entity> {
    return (await this.request("GET", `/v1/entities/${seg(type)}/${seg(id)}`)) as Entity;
  }

  /** One page of entities; pass `next` as `after` for the next. */
  async list(type: string, opts: ListOptions = {}): Promise<List<Entity>> {
    return (await this.request("GET", `/v1/entities/${seg(type)}` + query(opts))) as List<Entity>;
  }

  /** Every entity of a type, page by page. */
  async *all(type: string, opts: Omit<ListOptions, "after"> = {}): AsyncGenerator<Entity> {
    let after = "";
    for (;;) {
      const page = await this.list(type, { ...opts, after });
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
  async resolve(type: string, id: string, resolution: Side | Resolution): Promise<Entity> {
    const body = typeof resolution === "string" ? { take: resolution } : resolution;
    return (await this.request("POST", `/v1/entities/${seg(type)}/${seg(id)}/resolve`, { body })) as Entity;
  }

  /**
   * The versions the server keeps of the entity's record, newest first,
   * read from the server at each call: an edit overwritten or resolved
   * away can be found there and written again. Fails with not_on_server
   * (409: its create is not answered yet), versions_unsupported (501) or
   * remote_unavailable (503).
   */
  async versions(type: string, id: string): Promise<Version[]> {
    return ((await this.request("GET", `/v1/entities/${seg(type)}/${seg(id)}/versions`)) as { items: Version[] }).items;
  }

  /**
   * Reads the entity's record from the server again and settles the local
   * entity with it; `removed` is set when the server holds nothing under
   * the id. Fails with remote_unavailable (503) or refresh_unsupported (501).
   */
  async refresh(type: string, id: string): Promise<Entity> {
    return (await this.request("POST", `/v1/entities/${seg(type)}/${seg(id)}/refresh`)) as Entity;
  }

  /**
   * Makes every write in ONE transaction: all of them or, when one is
   * refused, none (the SyncdError's index names it). Each write without
   * an idempotencyKey gets one now, so a retry replays.
   */
  async batch(writes: BatchWrite[], opts: { ordered?: boolean } = {}): Promise<Entity[]> {
    const ws = writes.map((w) => ({ ...w, idempotencyKey: w.idempotencyKey ?? newKey() }));
    const body: Record<string, unknown> = { writes: ws };
    if (opts.ordered) body.ordered = true;
    const ans = (await this.request("POST", "/v1/batch", { body, retrySafe: true })) as { results: Entity[] };
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
  async addApp(name: string, types: string[], opts: { readOnly?: boolean } = {}): Promise<App> {
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
   * onEvent; close() ends it.
   */
  subscribe(opts: SubscribeOptions = {}): Subscription {
    if (!this.WS) {
      throw new TypeError("syncd: no WebSocket in this runtime; pass one as WebSocket (on Node 20: the ws package)");
    }
    return new Subscription(this.baseURL.replace(/^http/, "ws"), this.token, this.WS, this.tokenInSubprotocol, opts);
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
    // (the daemon answers a repeated key with the first answer).
    const resend = method === "GET" || o.key !== undefined || o.retrySafe === true;
    let delay = this.retryDelayMs;
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await this.fetchFn(this.baseURL + path, { method, headers, body: payload });
      } catch (err) {
        // Not reached (connection refused while the service restarts,
        // reset): send again, the same key.
        if (!resend || attempt >= this.retries) throw err;
        await sleep(delay);
        delay *= 2;
        continue;
      }
      const text = await res.text();
      if (res.status === 503 && resend && attempt < this.retries && text.includes('"shutting_down"')) {
        await sleep(delay);
        delay *= 2;
        continue;
      }
      if (!res.ok) throw toError(res.status, text);
      return text ? JSON.parse(text) : undefined;
    }
  }
}

export interface SubscribeOptions {
  since?: number;
  /** Only events of these types (and resync). */
  type?: string;
  entityType?: string;
  account?: string;
  onEvent?: (e: SyncEvent) => void;
  /**
   * Called when the stream ends for good because its app token was
   * revoked (a SyncdError with code token_revoked); the iterator then
   * throws it. Nothing reconnects after that.
   */
  onError?: (err: SyncdError) => void;
  /** The first reconnect wait, doubled up to maxDelayMs (default 100, 5000). */
  minDelayMs?: number;
  maxDelayMs?: number;
}

/** A live event stream; see SyncdClient.subscribe. */
export class Subscription implements AsyncIterable<SyncEvent> {
  /** The seq of the last event delivered. */
  lastSeq: number | undefined;
  private ws: WebSocketLike | undefined;
  private closed = false;
  private queue: SyncEvent[] = [];
  private waiters: ((r: IteratorResult<SyncEvent>) => void)[] = [];
  private delay: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private failure: SyncdError | undefined;
  private rejecters: ((err: SyncdError) => void)[] = [];

  constructor(
    private readonly wsBase: string,
    private readonly token: string,
    private readonly WS: WebSocketConstructor,
    private readonly tokenInSubprotocol: boolean,
    private readonly opts: SubscribeOptions,
  ) {
    this.lastSeq = opts.since;
    this.delay = opts.minDelayMs ?? 100;
    this.connect();
  }

  private connect(): void {
    if (this.closed) return;
    const q = new URLSearchParams();
    if (this.lastSeq !== undefined) q.set("since", String(this.lastSeq));
    if (this.opts.type) q.set("type", this.opts.type);
    if (this.opts.entityType) q.set("entityType", this.opts.entityType);
    if (this.opts.account) q.set("account", this.opts.account);
    const url = this.wsBase + "/v1/events" + (q.size ? "?" + q.toString() : "");
    const protocols = ["syncd.v1"];
    let ws: WebSocketLike;
    if (this.tokenInSubprotocol) {
      protocols.push("syncd.token." + this.token);
      ws = new this.WS(url, protocols);
    } else {
      // The ws package takes headers as a third argument.
      const WSWithOptions = this.WS as unknown as new (u: string, p: string[], o: unknown) => WebSocketLike;
      ws = new WSWithOptions(url, protocols, { headers: { Authorization: "Bearer " + this.token } });
    }
    this.ws = ws;
    ws.onopen = () => {
      this.delay = this.opts.minDelayMs ?? 100;
    };
    ws.onmessage = (ev) => {
      const text = typeof ev.data === "string" ? ev.data : String(ev.data);
      let e: SyncEvent;
      try {
        e = JSON.parse(text) as SyncEvent;
      } catch {
        return;
      }
      // After a reconnect the daemon resumes after lastSeq; a resync
      // jumps forward. Never deliver an event twice.
      if (e.type !== "resync" && this.lastSeq !== undefined && e.seq <= this.lastSeq) return;
      this.lastSeq = e.seq;
      this.deliver(e);
    };
    ws.onerror = () => {};
    ws.onclose = (ev) => {
      this.ws = undefined;
      if (this.closed) return;
      if (ev?.code === CLOSE_REVOKED) {
        // The app's token was revoked: reconnecting could only get 401.
        this.fail(new SyncdError(401, "token_revoked", ev.reason || "this app's token was revoked"));
        return;
      }
      this.timer = setTimeout(() => this.connect(), this.delay);
      this.delay = Math.min(this.delay * 2, this.opts.maxDelayMs ?? 5000);
    };
  }

  private deliver(e: SyncEvent): void {
    this.opts.onEvent?.(e);
    const w = this.waiters.shift();
    this.rejecters.shift();
    if (w) w({ value: e, done: false });
    else if (!this.opts.onEvent) this.queue.push(e);
  }

  private fail(err: SyncdError): void {
    this.closed = true;
    this.failure = err;
    this.opts.onError?.(err);
    this.waiters.splice(0);
    for (const r of this.rejecters.splice(0)) r(err);
  }

  /** Ends the stream: the iterator finishes, no reconnect. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.ws?.close(1000, "closed by the client");
    this.rejecters.splice(0);
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<SyncEvent> {
    return {
      next: () => {
        const e = this.queue.shift();
        if (e) return Promise.resolve({ value: e, done: false });
        if (this.failure) return Promise.reject(this.failure);
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

function toError(status: number, text: string): SyncdError {
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string; index?: number } };
    if (body.error?.code) return new SyncdError(status, body.error.code, body.error.message ?? "", body.error.index ?? -1);
  } catch {
    // not JSON
  }
  return new SyncdError(status, "http_" + status, text.trim());
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
