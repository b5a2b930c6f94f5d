// The local API's JSON, as localapi/openapi.json describes it.
// test/types.test.ts fails when the OpenAPI document gains a member these
// types (through the key lists below) do not carry.

export type SyncState = "pending" | "synced" | "failed" | "conflict" | "stale";
export type OperationState = "pending" | "sending" | "retry_waiting" | "permanent_failed" | "done";

/** The server's record of an entity beside the local one. */
export interface ServerRecord {
  /** Set when it is another record than the entity's serverId (the id was deleted, swept and created again). */
  id?: string;
  version: number;
  deleted?: boolean;
  data?: Record<string, unknown>;
  /** Why data is absent from a live record: too_large, refresh_needed. */
  missing?: "too_large" | "refresh_needed";
  /** The fields in conflict (JSON pointers), when the server named them: a merging server's refusal. */
  paths?: string[];
  /** The record's data at the version the refused change was made on, when the server's refusal carried it. */
  base?: Record<string, unknown>;
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

export interface Entity {
  accountId: string;
  type: string;
  id: string;
  /** null only for a stale entity whose data this device never held (too_large). */
  data: Record<string, unknown> | null;
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
  server?: ServerRecord;
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
export type Resolution =
  | { take: Side; paths?: never; data?: never }
  | { paths: Record<string, Side>; take?: never; data?: never }
  | { data: Record<string, unknown>; take?: never; paths?: never };

/** One version the server keeps of an entity's record (versions()). */
export interface Version {
  version: number;
  /** The record's data at this version; absent from a deletion. */
  data?: Record<string, unknown>;
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

/** An event's type-specific fields; those of entity events are typed. */
export type SyncEventData = Record<string, unknown> & EntityChangeData;

export interface SyncEvent {
  seq: number;
  time: string;
  type: string;
  accountId?: string;
  entityType?: string;
  entityId?: string;
  operationId?: string;
  state?: OperationState;
  syncState?: SyncState;
  errorCode?: string;
  mergedInto?: string;
  data?: SyncEventData;
  /** operation.state: the app that made the operation. */
  app?: string;
  /** operation.state of an operation held by its ordered group: what it waits for. */
  blockedBy?: string;
}

export interface BatchWrite {
  op: "create" | "update" | "delete";
  type: string;
  id?: string;
  data?: Record<string, unknown>;
  /** Made by the client when absent, before the first send. */
  idempotencyKey?: string;
}

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
  PullStatus: ["mode", "state", "lastPullAt", "received", "bootstrapReceived", "lastError"],
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
  "entity_stale", "versions_unsupported", "not_on_server",
] as const;

export type ErrorCode = (typeof errorCodes)[number];
