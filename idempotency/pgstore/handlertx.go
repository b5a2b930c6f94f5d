package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrTxOwnedByGate is returned by Commit and Rollback of the pgx.Tx a
// gated handler gets: the gate commits it, with the stored response, or
// rolls it back.
var ErrTxOwnedByGate = errors.New("pgstore: the transaction of a gated request is committed or rolled back by the gate")

// handlerTx is the pgx.Tx a handler gets: the request's transaction on
// its connection. The gate began it (in the same round trip as the
// reservation, which pgx's own Tx cannot do) and ends it; Begin makes
// savepoints as pgx does. LargeObjects is not supported.
type handlerTx struct {
	conn *pgx.Conn
}

var _ pgx.Tx = (*handlerTx)(nil)

func (t *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) { return beginSavepoint(ctx, t, 1) }
func (t *handlerTx) Commit(context.Context) error              { return ErrTxOwnedByGate }
func (t *handlerTx) Rollback(context.Context) error            { return ErrTxOwnedByGate }

// Conn returns nil: with the connection a handler could end the gate's
// transaction. Use the transaction's own methods.
func (t *handlerTx) Conn() *pgx.Conn { return nil }

// LargeObjects is not supported in a gated request; the returned value
// must not be used.
func (t *handlerTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.conn.CopyFrom(ctx, table, cols, src)
}

func (t *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

func (t *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

func (t *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.conn.Exec(ctx, sql, args...)
}

func (t *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.conn.Query(ctx, sql, args...)
}

func (t *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.conn.QueryRow(ctx, sql, args...)
}

// savepointTx is a pseudo nested transaction, as pgx's Tx.Begin makes.
type savepointTx struct {
	*handlerTx
	depth  int
	closed bool
}

func beginSavepoint(ctx context.Context, parent *handlerTx, depth int) (pgx.Tx, error) {
	if _, err := parent.conn.Exec(ctx, fmt.Sprintf("SAVEPOINT sp_%d", depth)); err != nil {
		return nil, err
	}
	return &savepointTx{handlerTx: parent, depth: depth}, nil
}

func (sp *savepointTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if sp.closed {
		return nil, pgx.ErrTxClosed
	}
	return beginSavepoint(ctx, sp.handlerTx, sp.depth+1)
}

func (sp *savepointTx) Commit(ctx context.Context) error {
	if sp.closed {
		return pgx.ErrTxClosed
	}
	sp.closed = true
	_, err := sp.conn.Exec(ctx, fmt.Sprintf("RELEASE SAVEPOINT sp_%d", sp.depth))
	return err
}

func (sp *savepointTx) Rollback(ctx context.Context) error {
	if sp.closed {
		return pgx.ErrTxClosed
	}
	sp.closed = true
	_, err := sp.conn.Exec(ctx, fmt.Sprintf("ROLLBACK TO SAVEPOINT sp_%d", sp.depth))
	return err
}
