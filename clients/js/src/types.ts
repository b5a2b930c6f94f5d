// The local API's JSON, as localapi/openapi.json describes it.
// test/types.test.ts fails when the OpenAPI document gains a member these
// types (through the key lists below) do not carry.

export const syncStates = ["pending", "synced", "failed", "conflict", "stale"] as const;
export type SyncState = (typeof syncStates)[number];
export type OperationState = "pending" | "sending" | "retry_waiting" | "permanent_failed" | "done";

/** An entity's data when no type is given for it: a JSON object. */
export type Data = Record<string, unknown>;

/**
 * The data type of each entity type, for a typed client:
 * `createClient<{ note: Note; task: Task }>()`. An interface is an object
 * type, so `interface Note { title: string }` fits.
 */
export type Schema = { [entityType: string]: object };

/** The schema of an untyped client: any entity type, any JSON object. */
export type AnySchema = { [entityType: string]: Data };

/** An entity type of schema S. */
export type EntityType<S extends Schema> = keyof S & string;

/**
 * An RFC 7396 merge patch of T: each field optional, null removes it,
 * nested objects are patched in turn (arrays are replaced whole).
 */
export type MergePatch<T> = { [P in keyof T]?: PatchValue<T[P]> | null };
type PatchValue<V> = V extends readonly unknown[] ? V : V extends object ? MergePatch<V> : V;

/** The server's record of an entity beside the local one. */
export interface ServerRecord<T = Data> {
  /** Set when it is another record than the entity's serverId (the id was deleted, swept and created again). */
  id?: string;
  version: number;
  deleted?: boolean;
  data?: T;
  /** Why data is absent from a live record: too_large, refresh_needed. */
  missing?: "too_large" | "refresh_needed";
  /** The fields in conflict (JSON pointers), when the server named them: a merging server's refusal. */
  paths?: string[];
  /** The record's data at the version the refused change was made on, when the server's refusal carried it. */
  base?: Data;
}

/**
 * One field in conflict. A value is absent (`!("local" in p)`) where the
 * field does not exist on that side, and `null` where it is JSON null;
 * `base` is absent too when the server no longer keeps the base version
 * (`baseKnown` false).
 */
export interface ConflictPath {
  /** The field, a JSON pointer such as /title or /address/city: a key of resolve's `paths`. */
  path: string;
  /** The field's value at the version this device's change was made on. */
  base?: unknown;
  baseKnown: boolean;
  /** The field's value on this device. */
  local?: unknown;
  /** The field's value on the server. */
  server?: unknown;
}

/** An entity's conflict field by field: only the fields both sides changed. */
export interface Conflict {
  paths: ConflictPath[];
}

/**
 * An entity as the daemon shows it, with its sync state. T is its data's
 * type (unchecked: the daemon stores any JSON object), K its entity type.
 */
export interface Entity<T = Data, K extends string = string> {
  accountId: string;
  type: K;
  id: string;
  /** null only for a stale entity whose data this device never held (too_large). */
  data: T | null;
  deleted?: boolean;
  syncState: SyncState;
  serverId?: string;
  syncError?: string;
  /** The stable code of syncError: the failed operation's code (failed, conflict), or why it is stale. */
  syncCode?: string;
  version: number;
  createdAt: string;
  updatedAt: string;
  lastOperationId: string;
  syncedOperationId?: string;
  serverVersion?: number;
  server?: ServerRecord<T>;
  /**
   * In state conflict, when the server named the fields in conflict (a
   * merging server): each with its base, local and server value. Absent:
   * the conflict is of the whole record (see `server`).
   */
  conflict?: Conflict;
  /** The entity's next operation is held by its ordered group (blockedBy: what it waits for). */
  blocked?: boolean;
  blockedBy?: string;
  /** The operation a write made (write answers only). */
  operationId?: string;
  /** Resolve and refresh only: the entity left the store. */
  removed?: boolean;
}

export interface Operation {
  id: string;
  seq: number;
  accountId: string;
  operationType: "create" | "update" | "delete";
  entityType: string;
  entityId: string;
  payloadVersion: number;
  payload?: Record<string, unknown>;
  payloadFingerprint: string;
  state: OperationState;
  attemptCount: number;
  nextAttemptAt: string;
  leaseOwner?: string;
  leaseExpiresAt?: string;
  lastErrorCode?: string;
  lastError?: string;
  createdAt: string;
  completedAt?: string;
  userRetriedAt?: string;
  requestFingerprint?: string;
  declined?: boolean;
  remoteKey?: string;
  maybeApplied?: boolean;
  mergedInto?: string;
  after?: string;
  /** Held by its ordered group: it waits until every earlier member is done. */
  blocked?: boolean;
  /** The earlier member it waits for: the nearest one not done. */
  blockedBy?: string;
  /** The app whose token made the write; absent for the admin token. */
  app?: string;
  /**
   * The fields an update changes (JSON pointers), sent beside the whole
   * data so a merging server applies only them. Absent: the whole data (a
   * create, a delete, an update syncd made).
   */
  paths?: string[];
}

/** A side of a conflict: resolve's take, and the values of its paths. */
export type Side = "server" | "local";

/**
 * How resolve settles a conflict: exactly one of
 * - `take`: the whole entity (`local` in a conflict field by field keeps
 *   this device's changed fields laid over the server's record);
 * - `paths`: a side for each field in conflict (each path of
 *   `conflict.paths`, and only those); this device's other changes are kept;
 * - `data`: the merged data the app made.
 */
export type Resolution<T = Data> =
  | { take: Side; paths?: never; data?: never }
  | { paths: Record<string, Side>; take?: never; data?: never }
  | { data: T; take?: never; paths?: never };

/** One version the server keeps of an entity's record (versions()). */
export interface Version<T = Data> {
  version: number;
  /** The record's data at this version; absent from a deletion. */
  data?: T;
  deleted?: boolean;
  /** The Idempotency-Key of the write that made it: an operation's id when this device made it. */
  operationId?: string;
  updatedAt?: string;
}

export interface List<T> {
  items: T[];
  next: string;
}

export interface PullStatus {
  mode: "auto" | "on" | "off";
  state: "off" | "idle" | "pulling" | "bootstrapping" | "paused" | "error";
  lastPullAt?: string;
  received: number;
  bootstrapReceived?: number;
  /** The share of the server's feed the full pass has read, 0 to 1, when the server says (an estimate, for a progress bar). */
  bootstrapProgress?: number;
  /** When the server's feed last answered (an empty long poll too). */
  lastReadAt?: string;
  lastError?: string;
}

export interface RemoteProblem {
  code: string;
  kind: string;
  seen: string;
  fix: string;
  since: string;
  nextCheckAt: string;
}

export interface Status {
  accountId?: string;
  signedIn: boolean;
  online: boolean;
  paused: boolean;
  pauseReason?: string;
  remoteProblem?: RemoteProblem;
  counts: Record<OperationState, number>;
  oldestPendingAgeSeconds: number;
  accountCounts?: Record<OperationState, number>;
  accountOldestPendingAgeSeconds?: number;
  fileSizeBytes: number;
  freeBytes: number;
  queuedBytes: number;
  maxQueueBytes?: number;
  queueFull?: boolean;
  lastEventSeq: number;
  pull: PullStatus;
  /** Admin token only: per app, the operations it made that are still kept, per state. */
  apps?: Record<string, Partial<Record<OperationState, number>>>;
  /** App tokens only: what the token may do; counts are then its types'. */
  app?: AppScope;
}

/** What an app token may do. */
export interface AppScope {
  name: string;
  types: string[];
  readOnly: boolean;
}

/** An app registered with syncd; token is set only in addApp's answer. */
export interface App {
  name: string;
  types: string[];
  readOnly: boolean;
  createdAt: string;
  token?: string;
}

/**
 * The data of an entity.changed or entity.removed event, when it carries
 * some.
 */
export interface EntityChangeData {
  /** remote: pulled from the server (another device's write); answer: a merging server's answer to this device's write. */
  origin?: "remote" | "answer";
  /** Fields of the server's record merged into an entity whose own edits wait: those whose local value changed. */
  paths?: string[];
  /** entity.changed in state conflict field by field: the fields in conflict (the entity's conflict has their values). */
  conflictPaths?: string[];
}

/** What every event has (docs/events.md). */
interface EventBase {
  seq: number;
  /** RFC 3339, UTC. */
  time: string;
}

/** An entity was written, its sync state changed, or a pulled change was applied. */
export interface EntityChangedEvent extends EventBase {
  type: "entity.changed";
  accountId: string;
  entityType: string;
  entityId: string;
  /** Its latest write. */
  operationId?: string;
  syncState: SyncState;
  data?: EntityChangeData;
}

/** An entity left the store (its delete reached the server, a discard, a purge, a pulled delete). */
export interface EntityRemovedEvent extends EventBase {
  type: "entity.removed";
  accountId: string;
  entityType: string;
  entityId: string;
  operationId?: string;
  syncState?: SyncState;
  data?: EntityChangeData;
}

/** An operation was created or changed state. */
export interface OperationStateEvent extends EventBase {
  type: "operation.state";
  accountId: string;
  entityType: string;
  entityId: string;
  operationId: string;
  state: OperationState;
  /** Once it failed: validation, forbidden, payload_conflict, operation_expired, ... */
  errorCode?: string;
  /** An update that went done unsent: the later operation that carries its data. */
  mergedInto?: string;
  /** The app whose token made the operation. */
  app?: string;
  /** Held by its ordered group: the earlier member it waits for. */
  blockedBy?: string;
}

/** An operation was removed unfinished (discard, purge, ...). */
export interface OperationPurgedEvent extends EventBase {
  type: "operation.purged";
  accountId: string;
  entityType: string;
  entityId: string;
  operationId: string;
}

/** logout with policy purge deleted an account's data. */
export interface AccountPurgedEvent extends EventBase {
  type: "account.purged";
  accountId: string;
}

/** An account signed in, or its token was replaced. */
export interface SessionChangedEvent extends EventBase {
  type: "session.changed";
  accountId: string;
  data: { accountId: string };
}

export interface SessionLoggedOutEvent extends EventBase {
  type: "session.logged_out";
  accountId?: string;
  data: { policy: "keep" | "purge"; purged: number };
}

/** The server refused the session's token: sending waits for setSession. */
export interface SessionRefreshNeededEvent extends EventBase {
  type: "session.refresh_needed";
  accountId?: string;
  data: { reason: "unauthorized" | "missing_token" | "invalid_token" };
}

/** The remote became reachable or not. */
export interface ConnectivityChangedEvent extends EventBase {
  type: "connectivity.changed";
  data: { online: boolean };
}

/** Sending paused: three entities in a row failed the same setup-mistake way. */
export interface RemoteMisconfiguredEvent extends EventBase {
  type: "remote.misconfigured";
  accountId?: string;
  data: { kind: "redirect" | "route_not_found" | "tls"; seen: string; fix: string };
}

export interface RemoteRestoredEvent extends EventBase {
  type: "remote.restored";
  accountId?: string;
  data: { kind: string };
}

/** The counts per operation state changed (at most one a second). */
export interface QueueTotalsEvent extends EventBase {
  type: "queue.totals";
  data: {
    counts: Record<OperationState, number>;
    oldestPendingAgeSeconds: number;
    accountId?: string;
    accountCounts?: Record<OperationState, number>;
    accountOldestPendingAgeSeconds?: number;
  };
}

/** The events asked for are gone: re-read the state you show, then carry on from seq. */
export interface ResyncEvent {
  type: "resync";
  seq: number;
  time?: string;
}

/** One event of the stream: narrow it by `type`. */
export type SyncEvent =
  | EntityChangedEvent
  | EntityRemovedEvent
  | OperationStateEvent
  | OperationPurgedEvent
  | AccountPurgedEvent
  | SessionChangedEvent
  | SessionLoggedOutEvent
  | SessionRefreshNeededEvent
  | ConnectivityChangedEvent
  | RemoteMisconfiguredEvent
  | RemoteRestoredEvent
  | QueueTotalsEvent
  | ResyncEvent;

/** Every event type. */
export type EventType = SyncEvent["type"];

/** A prefix of event types the stream's `type` filter takes: "entity." matches entity.changed and entity.removed. */
export type EventTypePrefix = EventType extends infer T ? (T extends `${infer P}.${string}` ? `${P}.` : never) : never;

/** What subscribe's `type` takes: an event type or a prefix. */
export type EventFilter = EventType | EventTypePrefix;

/** The events a filter lets through (resync passes every filter). */
export type EventOf<F extends EventFilter> =
  | (F extends `${infer P}.` ? Extract<SyncEvent, { type: `${P}.${string}` }> : Extract<SyncEvent, { type: F }>)
  | ResyncEvent;

/** The type-specific fields of an event (`data`), whatever its type. */
export type SyncEventData = SyncEvent extends infer E ? (E extends { data?: infer D } ? ("data" extends keyof E ? NonNullable<D> : never) : never) : never;

/**
 * One write of a batch: a create with the type's data, an update with a
 * merge patch of it, or a delete. idempotencyKey is made by the client
 * when absent, before the first send.
 */
export type BatchWrite<S extends Schema = AnySchema> = {
  [K in EntityType<S>]:
    | { op: "create"; type: K; id?: string; data: S[K]; idempotencyKey?: string }
    | { op: "update"; type: K; id: string; data: MergePatch<S[K]>; idempotencyKey?: string }
    | { op: "delete"; type: K; id: string; data?: never; idempotencyKey?: string };
}[EntityType<S>];

// The members each type carries, for the drift test against the OpenAPI
// document. Keep them in step with the interfaces above.
export const members = {
  Entity: ["accountId", "type", "id", "data", "deleted", "syncState", "serverId", "syncError", "syncCode", "version",
    "createdAt", "updatedAt", "lastOperationId", "syncedOperationId", "serverVersion", "server", "blocked", "blockedBy",
    "operationId", "conflict"],
  ServerRecord: ["id", "version", "deleted", "data", "missing", "paths", "base"],
  ConflictPath: ["path", "base", "baseKnown", "local", "server"],
  Version: ["version", "data", "deleted", "operationId", "updatedAt"],
  Operation: ["id", "seq", "accountId", "operationType", "entityType", "entityId", "payloadVersion", "payload",
    "payloadFingerprint", "state", "attemptCount", "nextAttemptAt", "leaseOwner", "leaseExpiresAt", "lastErrorCode",
    "lastError", "createdAt", "completedAt", "userRetriedAt", "requestFingerprint", "declined", "remoteKey",
    "maybeApplied", "mergedInto", "after", "blocked", "blockedBy", "app", "paths"],
  PullStatus: ["mode", "state", "lastPullAt", "received", "bootstrapReceived", "bootstrapProgress", "lastReadAt", "lastError"],
  RemoteProblem: ["code", "kind", "seen", "fix", "since", "nextCheckAt"],
  Status: ["accountId", "signedIn", "online", "paused", "pauseReason", "remoteProblem", "counts",
    "oldestPendingAgeSeconds", "accountCounts", "accountOldestPendingAgeSeconds", "fileSizeBytes", "freeBytes",
    "queuedBytes", "maxQueueBytes", "queueFull", "lastEventSeq", "pull", "apps", "app"],
  Event: ["seq", "time", "type", "accountId", "entityType", "entityId", "operationId", "state", "syncState",
    "errorCode", "mergedInto", "data", "app", "blockedBy"],
  App: ["name", "types", "readOnly", "createdAt", "token"],
  BatchWrite: ["op", "type", "id", "data", "idempotencyKey"],
} as const;

/** Every error code of the local API (ErrorCode in the OpenAPI document). */
export const errorCodes = [
  "unauthorized", "forbidden_host", "forbidden_origin", "not_found", "unknown_entity_type", "method_not_allowed",
  "request_timeout", "body_too_large", "unsupported_media_type", "invalid_json", "invalid_request", "no_session",
  "entity_exists", "illegal_transition", "not_purgeable", "no_conflict", "purge_in_progress", "idempotency_key_reused",
  "upgrade_required", "internal", "shutting_down", "too_many_subscribers", "storage_full", "admin_required", "read_only",
  "type_not_granted", "account_not_granted", "app_exists", "refresh_unsupported", "remote_unavailable",
  "entity_stale", "versions_unsupported", "not_on_server", "session_required", "csrf_failed", "too_many_links",
  "ui_unreachable",
] as const;

/** An error code of the local API. */
export type ErrorCode = (typeof errorCodes)[number];

/**
 * The codes the client itself gives a SyncdError:
 * - daemon_unreachable: no answer from the daemon (not running,
 *   restarting, a socket path where none listens), after the retries
 *   that were safe;
 * - token_revoked: an event stream's app token was revoked (close 4401);
 * - unexpected_response: an answer that is not the local API's (another
 *   program on the port, a proxy).
 */
export const clientErrorCodes = ["daemon_unreachable", "token_revoked", "unexpected_response"] as const;
export type ClientErrorCode = (typeof clientErrorCodes)[number];
