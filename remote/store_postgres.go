package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/changefeed"
	"github.com/syncd/syncd/changefeed/pgfeed"
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
	// The changes feed: each record's version, the key of the write that
	// made it, and its position in its actor's sequence; the per-actor
	// counter (its row lock orders one actor's writers until they
	// commit, so positions grow in commit order) and the tombstone
	// horizon. Existing records get positions in update order.
	`ALTER TABLE remote_entities ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 1;
	ALTER TABLE remote_entities ADD COLUMN IF NOT EXISTS operation_id TEXT;
	ALTER TABLE remote_entities ADD COLUMN IF NOT EXISTS change_seq BIGINT NOT NULL DEFAULT 0;
	CREATE TABLE IF NOT EXISTS remote_actor_seq (
		actor_id TEXT   PRIMARY KEY,
		seq      BIGINT NOT NULL,
		horizon  BIGINT NOT NULL DEFAULT 0
	);
	UPDATE remote_entities AS r SET change_seq = o.n FROM (
		SELECT id, row_number() OVER (PARTITION BY actor_id ORDER BY updated_at, id) AS n FROM remote_entities
	) AS o WHERE r.id = o.id;
	INSERT INTO remote_actor_seq (actor_id, seq)
		SELECT actor_id, max(change_seq) FROM remote_entities GROUP BY actor_id
		ON CONFLICT (actor_id) DO NOTHING;
	CREATE INDEX IF NOT EXISTS remote_entities_changes ON remote_entities (actor_id, change_seq);
	CREATE INDEX IF NOT EXISTS remote_entities_tombstones ON remote_entities (deleted_at) WHERE deleted_at IS NOT NULL`,
	// Field-level merge: the version each record's current life began
	// at (every path of a record from before changed, as far as the
	// merge knows, at its latest write) and the version of each path's
	// latest change since; and each record's recent versions.
	`ALTER TABLE remote_entities ADD COLUMN IF NOT EXISTS since BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE remote_entities ADD COLUMN IF NOT EXISTS path_versions JSON;
	UPDATE remote_entities SET since = version;
	CREATE TABLE IF NOT EXISTS remote_versions (
		entity_id    TEXT        NOT NULL,
		version      BIGINT      NOT NULL,
		data         JSON,
		deleted      BOOLEAN     NOT NULL DEFAULT false,
		operation_id TEXT,
		updated_at   TIMESTAMPTZ NOT NULL,
		PRIMARY KEY (entity_id, version)
	);
	CREATE INDEX IF NOT EXISTS remote_versions_age ON remote_versions (updated_at)`,
}

// nextSeqSQL gives the actor's next feed position and sends the NOTIFY
// that wakes its long polls on every replica when the transaction
// commits. The counter row stays locked until then.
const nextSeqSQL = `WITH s AS (
		INSERT INTO remote_actor_seq (actor_id, seq) VALUES ($1, 1)
		ON CONFLICT (actor_id) DO UPDATE SET seq = remote_actor_seq.seq + 1
		RETURNING seq)
	SELECT seq FROM s, pg_notify('` + pgfeed.Channel + `', $1)`

func nextSeq(ctx context.Context, tx pgx.Tx, actor string) (int64, error) {
	var seq int64
	if err := tx.QueryRow(ctx, nextSeqSQL, actor).Scan(&seq); err != nil {
		return 0, fmt.Errorf("remote: next feed position: %w", err)
	}
	return seq, nil
}

type pgEntities struct {
	pool    *pgxpool.Pool
	ownPool bool
	history int // versions kept per record (Config.HistoryVersions)
	// testHookChangesRead is Config.TestHookChangesRead.
	testHookChangesRead func(ctx context.Context)
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

func newPGEntities(ctx context.Context, pool *pgxpool.Pool, own bool, history int) (*pgEntities, error) {
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
	return &pgEntities{pool: pool, ownPool: own, history: history}, nil
}

const entityColumns = `id, client_id, entity_type, data, payload_version, created_at, updated_at, deleted_at, version, operation_id, change_seq, since, path_versions`

func scanEntity(row pgx.Row) (*Entity, error) {
	var (
		e         Entity
		data      []byte
		deletedAt *time.Time
	)
	var opID *string
	var paths []byte
	if err := row.Scan(&e.ID, &e.ClientID, &e.Type, &data, &e.PayloadVersion, &e.CreatedAt, &e.UpdatedAt, &deletedAt,
		&e.Version, &opID, &e.seq, &e.since, &paths); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	e.Data = data
	if len(paths) > 0 {
		if err := json.Unmarshal(paths, &e.paths); err != nil {
			return nil, fmt.Errorf("remote: decode path versions of %s: %w", e.ID, err)
		}
	}
	if opID != nil {
		e.OperationID = *opID
	}
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
	// The feed position first: it takes the actor's counter lock, so the
	// actor's writes commit in position order.
	seq, err := nextSeq(ctx, tx, actor)
	if err != nil {
		return nil, err
	}
	got, err := scanEntity(tx.QueryRow(ctx, `INSERT INTO remote_entities AS r
		(id, actor_id, entity_type, client_id, data, payload_version, created_at, updated_at, version, operation_id, change_seq, since)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7, 1, $8, $9, 1)
		ON CONFLICT (actor_id, entity_type, client_id) DO UPDATE
		SET data = EXCLUDED.data, payload_version = EXCLUDED.payload_version,
			created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, deleted_at = NULL,
			version = r.version + 1, operation_id = EXCLUDED.operation_id, change_seq = EXCLUDED.change_seq,
			since = r.version + 1, path_versions = NULL
		WHERE r.deleted_at IS NOT NULL
		RETURNING `+entityColumns,
		e.ID, actor, e.Type, e.ClientID, string(e.Data), e.PayloadVersion, e.CreatedAt, e.OperationID, seq))
	switch {
	case err == nil:
		e.ID = got.ID // a new row has e.ID; a row brought back keeps its own
		e.Version, e.seq = got.Version, got.seq
		e.replaced()
		return nil, s.keepVersion(ctx, tx, e)
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
	// The actor's counter lock before the row's, as a create takes them:
	// one order, no deadlock. A write that changes nothing leaves a gap
	// in the positions, which the feed does not mind.
	seq, err := nextSeq(ctx, tx, actor)
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
	e.seq = seq
	var paths []byte
	if len(e.paths) > 0 {
		if paths, err = json.Marshal(e.paths); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE remote_entities
		SET data = $2, payload_version = $3, updated_at = $4, deleted_at = $5, version = $6, operation_id = $7, change_seq = $8,
			since = $9, path_versions = $10
		WHERE id = $1`,
		e.ID, string(e.Data), e.PayloadVersion, e.UpdatedAt, e.DeletedAt, e.Version, e.OperationID, e.seq,
		e.since, nullableJSON(paths)); err != nil {
		return nil, fmt.Errorf("remote: update: %w", err)
	}
	return e, s.keepVersion(ctx, tx, e)
}

func nullableJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// keepVersion adds e's version to its history and drops the versions
// past the s.history newest.
func (s *pgEntities) keepVersion(ctx context.Context, tx pgx.Tx, e *Entity) error {
	if s.history < 0 {
		return nil
	}
	h := e.historyEntry()
	var data any
	if h.Data != nil {
		data = string(h.Data)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO remote_versions (entity_id, version, data, deleted, operation_id, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (entity_id, version) DO UPDATE SET data = EXCLUDED.data, deleted = EXCLUDED.deleted,
			operation_id = EXCLUDED.operation_id, updated_at = EXCLUDED.updated_at`,
		e.ID, h.Version, data, h.Deleted, h.OperationID, h.UpdatedAt); err != nil {
		return fmt.Errorf("remote: keep version: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM remote_versions WHERE entity_id = $1 AND version <= $2`,
		e.ID, e.Version-int64(max(s.history, 1))); err != nil {
		return fmt.Errorf("remote: drop old versions: %w", err)
	}
	return nil
}

func scanVersion(row pgx.Row) (Version, error) {
	var (
		h    Version
		data []byte
		opID *string
	)
	if err := row.Scan(&h.Version, &data, &h.Deleted, &opID, &h.UpdatedAt); err != nil {
		return h, err
	}
	h.Data = data
	if opID != nil {
		h.OperationID = *opID
	}
	h.UpdatedAt = h.UpdatedAt.UTC()
	return h, nil
}

func (s *pgEntities) versions(ctx context.Context, actor, typ, id string, limit int) ([]Version, error) {
	if _, err := s.get(ctx, actor, typ, id); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT version, data, deleted, operation_id, updated_at FROM remote_versions
		WHERE entity_id = $1 ORDER BY version DESC LIMIT $2`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("remote: versions: %w", err)
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		h, err := scanVersion(rows)
		if err != nil {
			return nil, fmt.Errorf("remote: versions: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

func (s *pgEntities) version(ctx context.Context, id string, v int64) (Version, bool, error) {
	tx, err := pgTx(ctx)
	if err != nil {
		return Version{}, false, err
	}
	h, err := scanVersion(tx.QueryRow(ctx, `SELECT version, data, deleted, operation_id, updated_at FROM remote_versions
		WHERE entity_id = $1 AND version = $2`, id, v))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Version{}, false, nil
	case err != nil:
		return Version{}, false, fmt.Errorf("remote: version: %w", err)
	}
	return h, true, nil
}

func (s *pgEntities) sweepHistory(ctx context.Context, before time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM remote_versions AS v
		WHERE v.updated_at < $1 AND NOT EXISTS (
			SELECT 1 FROM remote_entities AS r WHERE r.id = v.entity_id AND r.version = v.version)`, before)
	if err != nil {
		return 0, fmt.Errorf("remote: sweep versions: %w", err)
	}
	return int(tag.RowsAffected()), nil
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

// Changes implements changefeed.Source. The actor's head, horizon and
// rows are read in one read-only REPEATABLE READ transaction, so in one
// snapshot: a sweep that commits between the statements neither hides a
// tombstone from the rows nor shows a horizon the rows do not match.
func (s *pgEntities) Changes(ctx context.Context, actor string, after int64, limit int) (changefeed.Read, error) {
	var r changefeed.Read
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT seq, horizon FROM remote_actor_seq WHERE actor_id = $1`, actor).Scan(&r.Head, &r.Horizon)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if s.testHookChangesRead != nil {
			s.testHookChangesRead(ctx)
		}
		rows, err := tx.Query(ctx, `SELECT `+entityColumns+` FROM remote_entities
			WHERE actor_id = $1 AND change_seq > $2 ORDER BY change_seq LIMIT $3`, actor, after, limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanEntity(rows)
			if err != nil {
				return err
			}
			if len(r.Changes) == limit {
				r.More = true
				break
			}
			r.Changes = append(r.Changes, e.change())
			r.Positions = append(r.Positions, e.seq)
		}
		return rows.Err()
	})
	if err != nil {
		return changefeed.Read{}, fmt.Errorf("remote: changes: %w", err)
	}
	return r, nil
}

// sweepTombstones deletes tombstones deleted before before, 1,000 per
// statement, raising their actors' horizons in the same statement.
func (s *pgEntities) sweepTombstones(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		// The INSERT runs whether or not the SELECT reads it (a
		// data-modifying WITH always runs once).
		var n int
		err := s.pool.QueryRow(ctx, `WITH d AS (
				DELETE FROM remote_entities WHERE id IN (
					SELECT id FROM remote_entities WHERE deleted_at < $1 LIMIT 1000 FOR UPDATE SKIP LOCKED)
				RETURNING actor_id, change_seq),
			h AS (INSERT INTO remote_actor_seq AS a (actor_id, seq, horizon)
				SELECT actor_id, max(change_seq), max(change_seq) FROM d GROUP BY actor_id
				ON CONFLICT (actor_id) DO UPDATE SET horizon = GREATEST(a.horizon, EXCLUDED.horizon))
			SELECT count(*) FROM d`, before).Scan(&n)
		if err != nil {
			return total, fmt.Errorf("remote: sweep tombstones: %w", err)
		}
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}

func (s *pgEntities) close() error {
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}
