package remote

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency/pgstore"
)

// DefaultPostgresMaxConns is the pool size used when the DSN does not set
// pool_max_conns: PostgreSQL's own sizing advice, about two connections
// per core plus one, with this machine's cores standing in for the
// database's (the reference server's database usually runs beside it).
// More connections than the database has cores to run them only queue
// inside PostgreSQL: on a 2-core machine gated creates per second at 16
// clients peaked at 4–6 connections and fell by a tenth at 12 and 32.
// Duplicates of an in-flight key wait in the gate, not on a connection,
// unless they arrive at another replica. Set pool_max_conns for a bigger
// database.
func DefaultPostgresMaxConns() int32 { return int32(2*runtime.GOMAXPROCS(0) + 1) }

const pgMigrationLock = 0x73796e6364_02 // "syncd" 02

// pgMigrations are applied in order; remote_schema holds how many ran.
// Append, never edit. data is JSON (not JSONB) so answers show it as
// the client sent it (compacted).
var pgMigrations = []string{
	`CREATE TABLE IF NOT EXISTS remote_entities (
		id              TEXT        PRIMARY KEY,
		actor_id        TEXT        NOT NULL,
		entity_type     TEXT        NOT NULL,
		client_id       TEXT        NOT NULL,
		data            JSON        NOT NULL,
		payload_version BIGINT      NOT NULL,
		created_at      TIMESTAMPTZ NOT NULL,
		updated_at      TIMESTAMPTZ NOT NULL,
		deleted_at      TIMESTAMPTZ,
		UNIQUE (actor_id, entity_type, client_id)
	)`,
}

type pgEntities struct {
	pool    *pgxpool.Pool
	ownPool bool
}

// openPool opens a pool for dsn, with DefaultPostgresMaxConns unless the
// DSN sets pool_max_conns.
func openPool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("remote: PostgreSQL DSN: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = DefaultPostgresMaxConns()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("remote: PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("remote: PostgreSQL: %w", err)
	}
	return pool, nil
}

func newPGEntities(ctx context.Context, pool *pgxpool.Pool, own bool) (*pgEntities, error) {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgMigrationLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS remote_schema (version INTEGER NOT NULL)`); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `SELECT version FROM remote_schema`).Scan(&version)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := tx.Exec(ctx, `INSERT INTO remote_schema (version) VALUES (0)`); err != nil {
				return err
			}
		case err != nil:
			return err
		}
		for i := version; i < len(pgMigrations); i++ {
			if _, err := tx.Exec(ctx, pgMigrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE remote_schema SET version = $1`, len(pgMigrations))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("remote: migrate: %w", err)
	}
	return &pgEntities{pool: pool, ownPool: own}, nil
}

const entityColumns = `id, client_id, entity_type, data, payload_version, created_at, updated_at, deleted_at`

func scanEntity(row pgx.Row) (*Entity, error) {
	var (
		e         Entity
		data      []byte
		deletedAt *time.Time
	)
	if err := row.Scan(&e.ID, &e.ClientID, &e.Type, &data, &e.PayloadVersion, &e.CreatedAt, &e.UpdatedAt, &deletedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	e.Data = data
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	if deletedAt != nil {
		t := deletedAt.UTC()
		e.Deleted, e.DeletedAt = true, &t
	}
	return &e, nil
}

func pgTx(ctx context.Context) (pgx.Tx, error) {
	tx, ok := pgstore.TxFromContext(ctx)
	if !ok {
		return nil, errNoTx
	}
	return tx, nil
}

func (s *pgEntities) create(ctx context.Context, actor string, e *Entity) (*Entity, error) {
	tx, err := pgTx(ctx)
	if err != nil {
		return nil, err
	}
	// One statement inserts, or brings a deleted row back, or (a live
	// row) does nothing and returns no row. A racing create of the same
	// clientId waits on the row and re-checks deleted_at against the
	// winner's committed row (READ COMMITTED), so it finds it live. DO
	// UPDATE locks the conflicting row even when WHERE refuses it, so no
	// delete can commit between this and the SELECT below.
	got, err := scanEntity(tx.QueryRow(ctx, `INSERT INTO remote_entities AS r
		(id, actor_id, entity_type, client_id, data, payload_version, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
		ON CONFLICT (actor_id, entity_type, client_id) DO UPDATE
		SET data = EXCLUDED.data, payload_version = EXCLUDED.payload_version,
			created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, deleted_at = NULL
		WHERE r.deleted_at IS NOT NULL
		RETURNING `+entityColumns,
		e.ID, actor, e.Type, e.ClientID, string(e.Data), e.PayloadVersion, e.CreatedAt))
	switch {
	case err == nil:
		e.ID = got.ID // a new row has e.ID; a row brought back keeps its own
		return nil, nil
	case !errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("remote: create: %w", err)
	}
	old, err := scanEntity(tx.QueryRow(ctx, `SELECT `+entityColumns+` FROM remote_entities
		WHERE actor_id = $1 AND entity_type = $2 AND client_id = $3`, actor, e.Type, e.ClientID))
	if err != nil {
		return nil, fmt.Errorf("remote: create: read existing: %w", err)
	}
	return old, nil
}

func (s *pgEntities) update(ctx context.Context, actor, typ, id string, fn func(*Entity) bool) (*Entity, error) {
	tx, err := pgTx(ctx)
	if err != nil {
		return nil, err
	}
	e, err := scanEntity(tx.QueryRow(ctx, `SELECT `+entityColumns+` FROM remote_entities
		WHERE id = $1 AND actor_id = $2 AND entity_type = $3 FOR UPDATE`, id, actor, typ))
	if err != nil {
		return nil, err
	}
	if !fn(e) {
		return e, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE remote_entities
		SET data = $2, payload_version = $3, updated_at = $4, deleted_at = $5 WHERE id = $1`,
		e.ID, string(e.Data), e.PayloadVersion, e.UpdatedAt, e.DeletedAt); err != nil {
		return nil, fmt.Errorf("remote: update: %w", err)
	}
	return e, nil
}

func (s *pgEntities) get(ctx context.Context, actor, typ, id string) (*Entity, error) {
	return scanEntity(s.pool.QueryRow(ctx, `SELECT `+entityColumns+` FROM remote_entities
		WHERE id = $1 AND actor_id = $2 AND entity_type = $3`, id, actor, typ))
}

func (s *pgEntities) list(ctx context.Context, actor, typ, clientID string, limit int) ([]Entity, error) {
	q := `SELECT ` + entityColumns + ` FROM remote_entities WHERE actor_id = $1 AND entity_type = $2`
	args := []any{actor, typ}
	if clientID != "" {
		q += ` AND client_id = $3`
		args = append(args, clientID)
	}
	q += fmt.Sprintf(` ORDER BY client_id LIMIT %d`, limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("remote: list: %w", err)
	}
	defer rows.Close()
	var out []Entity
	for rows.Next() {
		e, err := scanEntity(rows)
		if err != nil {
			return nil, fmt.Errorf("remote: list: %w", err)
		}
		out = append(out, *e)
	}
	return out, rows.Err()
}

func (s *pgEntities) close() error {
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}
