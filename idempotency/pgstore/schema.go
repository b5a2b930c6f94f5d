package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrationLock is the advisory lock key held while migrating, so
// replicas that start together do not race on CREATE TABLE.
const migrationLock = 0x73796e6364_01 // "syncd" 01

// migrations are applied in order; the index+1 of the last applied one
// is stored in idempotency_schema. Append, never edit.
//
// Every request inserts a row and updates it in the same transaction:
// fillfactor 90 leaves room on the page for that update to be HOT (no
// index writes). The response headers are stored as JSON text in BYTEA,
// which needs no parsing on write. (A BRIN index on expires_at would be
// cheaper to write, but loses its order once vacuum lets new rows reuse
// the space of swept ones.)
var migrations = []string{
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
}

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idempotency_schema (version INTEGER NOT NULL)`); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `SELECT version FROM idempotency_schema`).Scan(&version)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := tx.Exec(ctx, `INSERT INTO idempotency_schema (version) VALUES (0)`); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		for i := version; i < len(migrations); i++ {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		if version < len(migrations) {
			if _, err := tx.Exec(ctx, `UPDATE idempotency_schema SET version = $1`, len(migrations)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}
