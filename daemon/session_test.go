package daemon

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/syncd/syncd/queue"
)

// A write that has read the account before a logout with purge started
// lands before the purge (and is purged with the rest), never after it.
func TestLogoutPurgeWaitsForWriteInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- e.d.AccountWrite(func(account string) error {
			close(entered)
			<-release
			_, err := e.store.Apply(ctx, queue.Write{Op: queue.OpCreate, AccountID: account, EntityType: "note", EntityID: "late", Data: json.RawMessage(`{}`)})
			return err
		})
	}()
	<-entered
	loggedOut := make(chan error, 1)
	go func() {
		_, err := e.d.Logout(ctx, LogoutPurge, true)
		loggedOut <- err
	}()
	// Release the write once the logout is either waiting for it (a
	// pending writer makes TryRLock fail) or, if it does not wait, done.
wait:
	for {
		select {
		case err := <-loggedOut:
			loggedOut <- err
			break wait
		default:
		}
		if !e.d.writes.TryRLock() {
			break
		}
		e.d.writes.RUnlock()
		runtime.Gosched()
	}
	close(release)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-loggedOut; err != nil {
		t.Fatal(err)
	}
	left, _, err := e.store.ListEntities("alice", "note", queue.ListOptions{})
	if err != nil || len(left) != 0 {
		t.Fatalf("%d entities of the purged account survive: %v", len(left), err)
	}
	if err := e.d.AccountWrite(func(string) error { return nil }); err != ErrNoSession {
		t.Fatalf("write after logout: %v", err)
	}
}
