// The daemon's sync state as an app shows it (online, offline, paused,
// unreachable) and its counts, kept current: the status is read at the
// start, again on each event that may change it, and when the event
// stream comes back after the daemon restarted; the stream dropping says
// the daemon is unreachable. useSyncStatus is this, for React.

import { SyncdError } from "./errors.js";
import type { SyncdClient } from "./index.js";
import type { Subscription } from "./events.js";
import type { OperationState, Status } from "./types.js";

/**
 * - "online": the daemon reaches the server;
 * - "offline": it does not (no network, the server down), or has not tried yet;
 * - "paused": sending waits for the user or a fix (`status.pauseReason`:
 *   signed_out, session_refresh_needed, remote_misconfigured);
 * - "unreachable": the daemon itself does not answer (not running, restarting).
 */
export type StatusState = "online" | "offline" | "paused" | "unreachable";

export interface SyncStatus {
  /**
   * undefined until the first answer (or the first failure to get one), and
   * again once the watch ended for good (`error` says why): this app can no
   * longer see the daemon's state.
   */
  state: StatusState | undefined;
  /** True until then. */
  loading: boolean;
  /** The daemon's last answer (kept while it is unreachable). */
  status: Status | undefined;
  /** Operations per state (for an app token: its types'); all 0 until the first answer. */
  counts: Record<OperationState, number>;
  /** Set when the watch ended for good (the app's token was revoked): a SyncdError. */
  error: unknown;
}

export interface StatusWatchOptions {
  /** Called with each new SyncStatus. */
  onChange?: (s: SyncStatus) => void;
  /** The event stream's reconnect waits (default 100, 5000 ms). */
  minDelayMs?: number;
  maxDelayMs?: number;
}

const zeroCounts: Record<OperationState, number> = { pending: 0, sending: 0, retry_waiting: 0, permanent_failed: 0, done: 0 };

/** The daemon's sync state, kept current; see SyncdClient.watchStatus. */
export class StatusWatch {
  /** The latest SyncStatus. */
  current: SyncStatus = { state: undefined, loading: true, status: undefined, counts: zeroCounts, error: undefined };
  private sub: Subscription | undefined;
  private reading = false;
  private again = false;
  private closed = false;
  /** The stream ended for good (onError): the last SyncStatus stays. */
  private ended = false;
  /** Bumped when the stream drops: a read begun before says nothing of now. */
  private epoch = 0;

  constructor(private readonly client: SyncdClient, private readonly opts: StatusWatchOptions = {}) {
    this.sub = client.subscribe({
      type: ["operation.state", "queue.totals", "connectivity.changed", "session.", "remote.", "account.purged"],
      minDelayMs: opts.minDelayMs,
      maxDelayMs: opts.maxDelayMs,
      onEvent: () => void this.read(),
      onOpen: () => void this.read(),
      onDisconnect: () => {
        this.epoch++;
        this.unreachable();
      },
      onError: (err) => this.end(err),
    }) as unknown as Subscription;
    void this.read();
  }

  /** Ends the watch: the stream closes, onChange is not called again. */
  close(): void {
    this.closed = true;
    this.sub?.close();
    this.sub = undefined;
  }

  /** The watch ended for good: no state is known from now on, and no read says otherwise. */
  private end(err: SyncdError): void {
    this.set({ ...this.current, state: undefined, loading: false, error: err });
    this.ended = true;
    this.sub?.close();
  }

  private set(s: SyncStatus): void {
    if (this.closed || this.ended) return;
    this.current = s;
    this.opts.onChange?.(s);
  }

  private unreachable(): void {
    if (this.current.state !== "unreachable") this.set({ ...this.current, state: "unreachable", loading: false });
  }

  /** Reads the status; one read at a time, and one more when asked meanwhile. */
  private async read(): Promise<void> {
    if (this.reading) {
      this.again = true;
      return;
    }
    this.reading = true;
    try {
      do {
        this.again = false;
        const epoch = this.epoch;
        try {
          const st = await this.client.status();
          if (this.closed) return;
          if (epoch !== this.epoch) continue;
          const state: StatusState = st.paused ? "paused" : st.online ? "online" : "offline";
          this.set({ state, loading: false, status: st, counts: st.counts, error: undefined });
        } catch (err) {
          if (this.closed) return;
          // The stream's reconnect reads it again when the daemon is back.
          if (err instanceof SyncdError && (err.code === "daemon_unreachable" || err.code === "shutting_down")) this.unreachable();
          // A token the daemon no longer knows (the app was removed): the
          // stream ends with it too, whichever says so first.
          else if (err instanceof SyncdError && err.status === 401) this.end(err);
          else this.set({ ...this.current, loading: false, error: err });
        }
      } while (this.again && !this.closed);
    } finally {
      this.reading = false;
    }
  }
}
