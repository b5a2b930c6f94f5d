package boltstore_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/boltstore"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bucketEffects = []byte("test_effects")

// openDB opens a fresh bbolt file in t.TempDir and checks its
// consistency when the test ends.
func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "test.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		})
		if err != nil {
			t.Errorf("bbolt consistency: %v", err)
		}
		db.Close()
	})
	return db
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		db := openDB(t)
		s, err := boltstore.New(db)
		if err != nil {
			t.Fatal(err)
		}
		return idempotencytest.Harness{
			Store: s,
			EndTx: func(ctx context.Context) error {
				tx, ok := boltstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no bolt tx in context")
				}
				return tx.Commit()
			},
			Effect: func(ctx context.Context, tag string) error {
				tx, ok := boltstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no bolt tx in context")
				}
				b, err := tx.CreateBucketIfNotExists(bucketEffects)
				if err != nil {
					return err
				}
				seq, err := b.NextSequence()
				if err != nil {
					return err
				}
				return b.Put(append([]byte(tag+"\x00"), byte(seq>>8), byte(seq)), nil)
			},
			Effects: func(ctx context.Context, tag string) (int, error) {
				n := 0
				err := db.View(func(tx *bolt.Tx) error {
					b := tx.Bucket(bucketEffects)
					if b == nil {
						return nil
					}
					prefix := []byte(tag + "\x00")
					c := b.Cursor()
					for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
						n++
					}
					return nil
				})
				return n, err
			},
			Record: s.Get,
		}
	})
}

func TestNewNilDB(t *testing.T) {
	t.Parallel()
	if _, err := boltstore.New(nil); !errors.Is(err, boltstore.ErrNoDB) {
		t.Fatalf("New(nil) = %v", err)
	}
}

func TestTxFromContextOutsideGate(t *testing.T) {
	t.Parallel()
	if _, ok := boltstore.TxFromContext(context.Background()); ok {
		t.Fatal("TxFromContext outside a gated request reported a tx")
	}
	var _ idempotency.Store = (*boltstore.Store)(nil)
}
