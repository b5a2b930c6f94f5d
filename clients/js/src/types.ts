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
  data?: Record<string, unknown>;
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
    "operationId"],
  ServerRecord: ["id", "version", "deleted", "data", "missing"],
  Operation: ["id", "seq", "accountId", "operationType", "entityType", "entityId", "payloadVersion", "payload",
    "payloadFingerprint", "state", "attemptCount", "nextAttemptAt", "leaseOwner", "leaseExpiresAt", "lastErrorCode",
    "lastError", "createdAt", "completedAt", "userRetriedAt", "requestFingerprint", "declined", "remoteKey",
    "maybeApplied", "mergedInto", "after", "blocked", "blockedBy", "app"],
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
  "entity_stale",
] as const;

export type ErrorCode = (typeof errorCodes)[number];
