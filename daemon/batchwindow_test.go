package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// TestBatchWindowGrows: a queue of 300 creates drained by one worker to
// the reference server (which advertises 100 operations a batch) goes
// out in batches of 8, 16, 32, 64 and then 100: the first operation
// waits for a batch of 8, not for a full one behind the whole backlog.
func TestBatchWindowGrows(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn, Concurrency: 1}})
	var ws []queue.Write
	for i := range 300 {
		ws = append(ws, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note",
			EntityID: fmt.Sprintf("n%03d", i), Data: json.RawMessage(`{}`)})
	}
	if _, err := e.store.ApplyBatch(t.Context(), ws, false); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	settled(t, e, len(ws))
	var sizes []int
	for _, l := range e.proxy.Log() {
		if l.Request.Method != "POST" || l.Request.Path != transport.BatchPath {
			continue
		}
		var body struct {
			Operations []json.RawMessage `json:"operations"`
		}
		if err := json.Unmarshal(l.Request.Body, &body); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(body.Operations))
	}
	if want := []int{8, 16, 32, 64, 100, 80}; !slices.Equal(sizes, want) {
		t.Fatalf("batches of %v operations, want %v", sizes, want)
	}
	rec := httptest.NewRecorder()
	e.d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"offline_batch_operations_count 6", "offline_batch_operations_sum 300", `offline_batch_operations_bucket{le="8"} 1`} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// TestBatchWindowAdapts: the window doubles on a batch the server
// answered (an item's 503 is an answer), halves on one that got none (a
// network error or timeout of the whole request), never below 2 nor
// above the daemon's BatchSize, and an outcome that says nothing (not
// sent) leaves it.
func TestBatchWindowAdapts(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{Batch: BatchOn, BatchSize: 50}})
	d := e.d
	answered := []transport.Outcome{{Status: 503}, {Code: transport.CodeNetwork}}
	lost := []transport.Outcome{{Code: transport.CodeTimeout}, {Code: transport.CodeNetwork}}
	unsent := []transport.Outcome{{Code: transport.CodeCanceled}}
	window := func() int {
		d.batchMu.Lock()
		defer d.batchMu.Unlock()
		return d.windowLocked()
	}
	steps := []struct {
		outs []transport.Outcome
		want int
	}{
		{nil, initialBatchWindow},
		{answered, 16}, {answered, 32}, {answered, 50}, {answered, 50},
		{lost, 25}, {unsent, 25}, {lost, 12}, {lost, 6}, {lost, 3}, {lost, 2}, {lost, 2},
		{answered, 4},
	}
	for i, s := range steps {
		if s.outs != nil {
			d.batchAnswered(s.outs)
		}
		if got := window(); got != s.want {
			t.Fatalf("step %d: window %d, want %d", i, got, s.want)
		}
	}
}
