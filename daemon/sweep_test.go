package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
)

// Done operations past the retention window are swept; younger ones stay.
func TestSweepOnceRemovesDoneOperations(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	old := e.create("old", `{"v":1}`).Operation
	e.drain()
	e.clock.Advance(queue.DefaultDoneRetention + time.Minute)
	young := e.create("young", `{"v":1}`).Operation
	e.drain()
	e.d.SweepOnce(context.Background())
	if _, err := e.store.GetOperation(old.ID); !errors.Is(err, queue.ErrOperationNotFound) {
		t.Fatalf("old done operation after the sweep: %v", err)
	}
	e.wantState(young.ID, queue.StateDone)
	if e.entity("old").SyncState != queue.SyncSynced {
		t.Fatal("the sweep touched the entity")
	}
}
