package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency/internal/pgsql"
)

// migrate brings the library's tables up to date and then runs app, the
// application's own migrations (Config.Migrate), in one transaction
// under one advisory lock.
func migrate(ctx context.Context, pool *pgxpool.Pool, app func(ctx context.Context, tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgsql.MigrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pgsql.CreateSchemaTable); err != nil {
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
		for i := version; i < len(pgsql.Migrations); i++ {
			if _, err := tx.Exec(ctx, pgsql.Migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		if version < len(pgsql.Migrations) {
			if _, err := tx.Exec(ctx, `UPDATE idempotency_schema SET version = $1`, len(pgsql.Migrations)); err != nil {
				return err
			}
		}
		if app != nil {
			if err := app(ctx, tx); err != nil {
				return fmt.Errorf("the application's migration: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}
