// The event stream (GET /v1/events, docs/events.md): a WebSocket that
// resumes after the last event it delivered, across reconnects.

import { SyncdError } from "./errors.js";
import type { EventFilter, EventOf, SyncEvent } from "./types.js";

// A function type whose parameter is checked bivariantly (a method's), so
// that the `ws` package's handlers, which take its own event classes,
// and the DOM's fit the same slot without a cast.
type Handler<E> = { bivarianceHack(ev: E): void }["bivarianceHack"];

/**
 * What the client needs of a WebSocket: the DOM's (a browser, Electron's
 * renderer, Node 22+'s global) and the `ws` package's both fit.
 */
export interface WebSocketLike {
  onopen: Handler<unknown> | null;
  onmessage: Handler<{ data: unknown }> | null;
  onclose: Handler<{ code: number; reason: string }> | null;
  onerror: Handler<unknown> | null;
  close(code?: number, reason?: string): void;
}

/** A WebSocket constructor: the global one, or the `ws` package's default export. */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** The close code of an event stream whose app token was revoked. */
export const CLOSE_REVOKED = 4401;

export interface SubscribeOptions<F extends EventFilter = EventFilter, K extends string = string> {
  /** The seq of the last event you handled; absent: from now. */
  since?: number;
  /** Only events of these types or prefixes ("entity."); resync passes every filter. */
  type?: F | readonly F[];
  /** Only events about entities of this type. */
  entityType?: K;
  account?: string;
  onEvent?: (e: EventOf<F>) => void;
  /**
   * Called when the stream ends for good: its app token was revoked (a
   * SyncdError with code token_revoked), or the daemon refuses it (an
   * unknown or removed token, a type not granted: the SyncdError of that
   * answer, 401 or 403). The iterator then throws it. Nothing reconnects
   * after that; a daemon that is down or restarting is not a refusal, nor
   * is `account` naming an account that is not signed in (403
   * account_not_granted): that stream keeps trying, with onDisconnect,
   * and opens when the account signs in.
   */
  onError?: (err: SyncdError) => void;
  /** Called each time the stream is (re)connected. */
  onOpen?: () => void;
  /**
   * Called each time the stream's connection ends or fails to open (the
   * daemon stopped or restarts) before it reconnects by itself; not
   * after close().
   */
  onDisconnect?: () => void;
  /** The first reconnect wait, doubled up to maxDelayMs (default 100, 5000). */
  minDelayMs?: number;
  maxDelayMs?: number;
}

/** How Subscription opens its sockets; made by SyncdClient. */
export interface Dialer {
  wsBase: string;
  token: string;
  WS: WebSocketConstructor;
  /** Send the token in the subprotocol (else an Authorization header, the ws package's third argument). */
  tokenInSubprotocol: boolean;
  /**
   * Asks the daemon over plain HTTP why a handshake failed (a WebSocket
   * cannot see the status of a refused handshake): the refusal to end
   * the stream with, or undefined when another try may succeed (the
   * daemon is down, restarting, or busy).
   */
  whyRefused?: (url: string) => Promise<SyncdError | undefined>;
}

/** A live event stream; see SyncdClient.subscribe. */
export class Subscription<E extends SyncEvent = SyncEvent> implements AsyncIterable<E> {
  /** The seq of the last event delivered. */
  lastSeq: number | undefined;
  private ws: WebSocketLike | undefined;
  private closed = false;
  private queue: E[] = [];
  private waiters: ((r: IteratorResult<E>) => void)[] = [];
  private delay: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private failure: SyncdError | undefined;
  private rejecters: ((err: SyncdError) => void)[] = [];
  private readonly opts: SubscribeOptions<EventFilter>;

  constructor(private readonly dialer: Dialer, opts: SubscribeOptions<EventFilter>) {
    this.opts = opts;
    this.lastSeq = opts.since;
    this.delay = opts.minDelayMs ?? 100;
    this.connect();
  }

  private connect(): void {
    if (this.closed) return;
    const q = new URLSearchParams();
    if (this.lastSeq !== undefined) q.set("since", String(this.lastSeq));
    const types = this.opts.type === undefined ? [] : typeof this.opts.type === "string" ? [this.opts.type] : this.opts.type;
    if (types.length) q.set("type", types.join(","));
    if (this.opts.entityType) q.set("entityType", this.opts.entityType);
    if (this.opts.account) q.set("account", this.opts.account);
    const url = this.dialer.wsBase + "/v1/events" + (q.size ? "?" + q.toString() : "");
    const protocols = ["syncd.v1"];
    let ws: WebSocketLike;
    if (this.dialer.tokenInSubprotocol) {
      protocols.push("syncd.token." + this.dialer.token);
      ws = new this.dialer.WS(url, protocols);
    } else {
      // The ws package takes headers as a third argument.
      const WSWithOptions = this.dialer.WS as unknown as new (u: string, p: string[], o: unknown) => WebSocketLike;
      ws = new WSWithOptions(url, protocols, { headers: { Authorization: "Bearer " + this.dialer.token } });
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.delay = this.opts.minDelayMs ?? 100;
      this.opts.onOpen?.();
    };
    ws.onmessage = (ev) => {
      const text = typeof ev.data === "string" ? ev.data : String(ev.data);
      let e: E;
      try {
        e = JSON.parse(text) as E;
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
      if (!opened && this.dialer.whyRefused) {
        // The handshake failed: a refusal (a wrong or removed token, a
        // type not granted) would fail the same way forever, so ask.
        void this.dialer.whyRefused(url).then(
          (err) => this.afterFailedOpen(err),
          () => this.afterFailedOpen(undefined),
        );
        return;
      }
      this.reconnectLater();
    };
  }

  private afterFailedOpen(refusal: SyncdError | undefined): void {
    if (this.closed) return;
    if (refusal) this.fail(refusal);
    else this.reconnectLater();
  }

  private reconnectLater(): void {
    this.opts.onDisconnect?.();
    this.timer = setTimeout(() => this.connect(), this.delay);
    this.delay = Math.min(this.delay * 2, this.opts.maxDelayMs ?? 5000);
  }

  private deliver(e: E): void {
    (this.opts.onEvent as ((e: E) => void) | undefined)?.(e);
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

  [Symbol.asyncIterator](): AsyncIterator<E> {
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
