// Package pgsql holds the SQL the PostgreSQL idempotency stores share
// (pgstore on pgx, sqlstore on database/sql): one schema, one set of
// statements, so both stores read and write the same records and a
// backend may use either, or both, on one database.
package pgsql

import (
	"sync/atomic"
	"time"

	"github.com/syncd/syncd/idempotency"
)

// MigrationLock is the advisory lock key held while migrating, so
// replicas that start together do not race on CREATE TABLE.
const MigrationLock = 0x73796e6364_01 // "syncd" 01

// CreateSchemaTable creates the table that holds the applied migration.
const CreateSchemaTable = `CREATE TABLE IF NOT EXISTS idempotency_schema (version INTEGER NOT NULL)`

// Migrations are applied in order; the index+1 of the last applied one
// is stored in idempotency_schema. Append, never edit.
//
// Every request inserts a row and updates it in the same transaction.
// The update is HOT (no index entries, a smaller WAL record) when it
// changes no indexed column and the new row version fits on the page:
// fillfactor 90 leaves room on the page for it, and the sweep's index is
// on sweep_after, which the reservation sets to the record's expiry once
// completed (its creation plus the retention, as Retention guesses it),
// so that the completion, which sets it to the expiry it knows, leaves
// it as it was (migration 2; migration 1 indexed expires_at, which the
// completion moves from the end of the processing lease to the end of
// the retention). The response headers are stored as JSON text in
// BYTEA, which needs no parsing on write. (A BRIN index would be cheaper
// to write, but loses its order once vacuum lets new rows reuse the
// space of swept ones.)
//
// sweep_after is never after expires_at once a record is completed, and
// equal to it when the completion came through these statements; a
// processing record's is one retention after its creation. Rows that a
// replica still running migration 1's statements inserts get theirs
// from expires_at, by the trigger (the end of the processing lease, and
// its completion leaves it there: such a record is found by every sweep
// from then on, and deleted once expired).
var Migrations = []string{
	`CREATE TABLE IF NOT EXISTS idempotency_records (
		actor_id            TEXT        NOT NULL,
		operation_id        TEXT        NOT NULL,
		operation_type      TEXT        NOT NULL,
		request_fingerprint CHAR(64)    NOT NULL,
		status              TEXT        NOT NULL,
		response_status     INTEGER,
		response_headers    BYTEA,
		response_body       BYTEA,
		created_at          TIMESTAMPTZ NOT NULL,
		completed_at        TIMESTAMPTZ,
		expires_at          TIMESTAMPTZ NOT NULL,
		PRIMARY KEY (actor_id, operation_id)
	) WITH (fillfactor = 90);
	CREATE INDEX IF NOT EXISTS idempotency_records_expires_at ON idempotency_records (expires_at)`,
	`ALTER TABLE idempotency_records ADD COLUMN sweep_after TIMESTAMPTZ;
	UPDATE idempotency_records SET sweep_after = expires_at;
	ALTER TABLE idempotency_records ALTER COLUMN sweep_after SET NOT NULL;
	CREATE FUNCTION idempotency_records_sweep_after() RETURNS trigger LANGUAGE plpgsql AS
		'BEGIN NEW.sweep_after := NEW.expires_at; RETURN NEW; END';
	CREATE TRIGGER idempotency_records_sweep_after BEFORE INSERT ON idempotency_records
		FOR EACH ROW WHEN (NEW.sweep_after IS NULL) EXECUTE FUNCTION idempotency_records_sweep_after();
	CREATE INDEX idempotency_records_sweep_after ON idempotency_records (sweep_after);
	DROP INDEX idempotency_records_expires_at`,
}

// Retention guesses, when a store reserves a key, the retention the gate
// will give the record when it completes it, which a store is not told
// until then: the last completion's (its expiry less its creation), or
// idempotency.DefaultRetention before the first. The reservation sets
// sweep_after to the creation plus the guess, and the completion to the
// expiry (the gate's is the creation plus its retention): when the
// guess was right that changes nothing, and the completion's update is
// HOT; when not (the first completions after the store opens, with a
// gate configured otherwise, or gates of two retentions on one store),
// it moves the index entry as every completion did before migration 2,
// and the record is as correct. The zero value is ready; it is safe for
// concurrent use.
type Retention struct{ d atomic.Int64 }

// SweepAfter returns the sweep_after of a record created at created.
func (r *Retention) SweepAfter(created time.Time) time.Time {
	d := time.Duration(r.d.Load())
	if d <= 0 {
		d = idempotency.DefaultRetention
	}
	return created.Add(d)
}

// Learn takes the retention of a completed record, created at created
// and expiring at expires.
func (r *Retention) Learn(created, expires time.Time) {
	if d := expires.Sub(created); d > 0 && time.Duration(r.d.Load()) != d {
		r.d.Store(int64(d))
	}
}

// LockKey is the advisory lock key of ($1 actor, $2 key). Advisory
// locks are per database, so it hashes the schema too: stores in two
// schemas of one database do not hold each other's keys.
const LockKey = `hashtextextended(current_schema() || ':' || length($1)::text || ':' || $1 || $2, 0)`

// Reserve claims (actor, key): it takes a transaction-scoped advisory
// lock on the pair without waiting, and inserts the processing record
// only if it got the lock. Every reservation takes that lock first, so a
// transaction that holds the key uncommitted always holds the lock too:
// a duplicate finds the lock taken and answers at once, instead of
// waiting on the primary key (and holding a pooled connection) until
// the first ends. It returns whether it got the lock and how many rows
// it inserted (0 on a conflict with a committed record). The lock's key
// is LockKey. $7 is the record's sweep_after (Retention.SweepAfter).
const Reserve = `WITH l AS (
		SELECT pg_try_advisory_xact_lock(` + LockKey + `) AS got),
	ins AS (INSERT INTO idempotency_records
		(actor_id, operation_id, operation_type, request_fingerprint, status, created_at, expires_at, sweep_after)
		SELECT $1, $2, $3, $4, 'processing', $5, $6, $7 FROM l WHERE l.got
		ON CONFLICT (actor_id, operation_id) DO NOTHING RETURNING 1)
	SELECT (SELECT got FROM l), (SELECT count(*) FROM ins)`

// ReserveRead is Reserve that also reads the record, in the same round
// trip: it returns whether it got the lock, how many rows it inserted,
// and the columns of SelectRecord for the record the statement's
// snapshot sees (NULLs when there is none). When the lock is taken, or
// the key has a committed record, that is the record to answer with,
// without a second statement. (A record committed after the statement
// began is not seen: the lock was got, nothing was inserted, and no
// record came back; the caller reads again.)
const ReserveRead = `WITH l AS (SELECT pg_try_advisory_xact_lock(` + LockKey + `) AS got)` + reserveRead

// ReserveReadWithLimits is ReserveRead that first sets the transaction's
// lock_timeout ($8) and idle_in_transaction_session_timeout ($9), as
// SET LOCAL does: the statement that follows BEGIN, so that a
// transaction of its own begins in one statement fewer.
const ReserveReadWithLimits = `WITH c AS (
		SELECT set_config('lock_timeout', $8, true) AS lock_timeout,
			set_config('idle_in_transaction_session_timeout', $9, true) AS lease),
	l AS (SELECT pg_try_advisory_xact_lock(` + LockKey + `) AS got FROM c)` + reserveRead

const reserveRead = `,
	ins AS (INSERT INTO idempotency_records
		(actor_id, operation_id, operation_type, request_fingerprint, status, created_at, expires_at, sweep_after)
		SELECT $1, $2, $3, $4, 'processing', $5, $6, $7 FROM l WHERE l.got
		ON CONFLICT (actor_id, operation_id) DO NOTHING RETURNING 1)
	SELECT l.got, (SELECT count(*) FROM ins), r.operation_type, r.request_fingerprint, r.status, r.response_status,
		r.response_headers, r.response_body, r.created_at, r.completed_at, r.expires_at
	FROM l LEFT JOIN idempotency_records r ON r.actor_id = $1 AND r.operation_id = $2`

// SelectRecord reads the committed record of ($1 actor, $2 key).
const SelectRecord = `SELECT operation_type, request_fingerprint, status, response_status,
	response_headers, response_body, created_at, completed_at, expires_at
FROM idempotency_records WHERE actor_id = $1 AND operation_id = $2`

// DeleteExpired deletes the record of ($1 actor, $2 key) if it expired at
// or before $3.
const DeleteExpired = `DELETE FROM idempotency_records
	WHERE actor_id = $1 AND operation_id = $2 AND expires_at <= $3`

// Complete completes the processing record of ($1 actor, $2 key) with
// the answer; 1/count(*) fails the statement, and so the transaction,
// unless exactly that row was completed. It sets sweep_after to the new
// expiry ($7), which is what the reservation set when Retention guessed
// right: then no indexed column changes, and the update is HOT.
const Complete = `WITH u AS (UPDATE idempotency_records
	SET status = 'completed', response_status = $3, response_headers = $4, response_body = $5,
		completed_at = $6, expires_at = $7, sweep_after = $7
	WHERE actor_id = $1 AND operation_id = $2 AND status = 'processing' RETURNING 1)
	SELECT 1/count(*) FROM u`

// SweepBatch is how many records one Sweep statement deletes.
const SweepBatch = 1000

// Sweep deletes up to $3 (SweepBatch) records that expired at or before
// $1, walking the sweep_after index from $2 on, in its order, skipping
// rows a running request holds, and returns how many it deleted and the
// last sweep_after it deleted. A completed record's sweep_after is its
// expiry (or, for a row a replica on migration 1 wrote, before it: such
// rows are passed over until they expire). Walking from the last
// sweep_after deleted (a keyset) starts each statement where the
// previous one ended, instead of walking again over the index entries
// of rows already deleted, which stay until vacuum can remove them
// (long, behind any open transaction).
const Sweep = `WITH d AS (DELETE FROM idempotency_records WHERE (actor_id, operation_id) IN (
		SELECT actor_id, operation_id FROM idempotency_records
		WHERE sweep_after <= $1 AND sweep_after >= $2 AND expires_at <= $1
		ORDER BY sweep_after LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING sweep_after)
	SELECT count(*), max(sweep_after) FROM d`
