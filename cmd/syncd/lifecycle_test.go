package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
)

// TestRunSIGTERMDuringWrites stops syncd with SIGTERM while apps write
// and the engine sends: every write answered 2xx is on disk with its
// operation, no operation is left sending, and the process exits within
// its stop deadline.
func TestRunSIGTERMDuringWrites(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startRun(t, dataDir)
	if st, m := p.call(t, "PUT", "/v1/session", `{"accountId":"alice","accessToken":"alice.t"}`); st != 200 {
		t.Fatalf("session: %d %v", st, m)
	}

	const writers = 8
	var (
		mu       sync.Mutex
		acked    []string // ids answered 201
		wg       sync.WaitGroup
		enough   = make(chan struct{})
		enoughMu sync.Once
	)
	client := &http.Client{Timeout: 10 * time.Second}
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				req, _ := http.NewRequest("POST", p.url+"/v1/entities/note", strings.NewReader(`{"id":"`+id+`","data":{"n":`+fmt.Sprint(i)+`}}`))
				req.Header.Set("Authorization", "Bearer "+p.token)
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					return // the server is gone
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == 201 {
					mu.Lock()
					acked = append(acked, id)
					if len(acked) >= 200 {
						enoughMu.Do(func() { close(enough) })
					}
					mu.Unlock()
				} else if res.StatusCode >= 500 {
					return // shutting down
				}
			}
		})
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("not 200 writes in 30s")
	}

	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, drain(p.stdout))
		exited <- p.cmd.Wait()
	}()
	// Stop deadline: the API's shutdown (5s) and the engine's
	// (shutdownTimeout, 5s), plus slack for a loaded machine.
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v; stderr:\n%s", err, p.stderr)
		}
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-exited
		t.Fatalf("still running 15s after SIGTERM; stderr:\n%s", p.stderr)
	}
	took := time.Since(start)
	wg.Wait()
	t.Logf("%d writes acknowledged; exited %s after SIGTERM", len(acked), took.Round(time.Millisecond))

	store, err := queue.Open(filepath.Join(dataDir, dataFileName), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, id := range acked {
		e, err := store.GetEntity("alice", "note", id)
		if err != nil {
			t.Errorf("acknowledged write %s: %v", id, err)
			continue
		}
		if _, err := store.GetOperation(e.LastOperationID); err != nil {
			t.Errorf("operation of %s: %v", id, err)
		}
	}
	sending, _, err := store.ListOperations(queue.ListOptions{State: queue.StateSending})
	if err != nil {
		t.Fatal(err)
	}
	if len(sending) > 0 {
		t.Errorf("%d operations left sending after a graceful stop, e.g. %+v", len(sending), sending[0])
	}
	if err := store.Check(); err != nil {
		t.Errorf("check: %v", err)
	}
}
