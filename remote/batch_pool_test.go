package remote

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/syncd/syncd/idempotency/idempotencytest"
)

// TestBatchesOutnumberConnections: more batches at once than the
// PostgreSQL pool has connections all finish. Each batch's group holds
// one connection until it commits; a member that needed a second one
// (the gate's read of its key before reserving it, from the pool) waited
// for a connection only another waiting batch could give back: every
// batch hung until its client gave up (found by the convergence
// checker: three devices' batches on a pool of five).
func TestBatchesOutnumberConnections(t *testing.T) {
	t.Parallel()
	h := setup(t, Config{PostgresDSN: withPoolMaxConns(idempotencytest.PostgresDSN(t), 2)})
	const batches, per = 6, 10
	var wg sync.WaitGroup
	errs := make(chan error, batches)
	for b := range batches {
		wg.Go(func() {
			body := `{"operations":[`
			for i := range per {
				if i > 0 {
					body += ","
				}
				body += fmt.Sprintf(`{"idempotencyKey":"pool-%d-%d","method":"POST","path":"/v1/notes","body":{"clientId":"c%d-%d","data":{}}}`, b, i, b, i)
			}
			r, err := h.do("POST", "/v1/batch", "alice", "", body+`]}`)
			if err == nil && (r.status != 200 || strings.Count(r.body, `"status":201`) != per) {
				err = fmt.Errorf("batch %d: %d %s", b, r.status, r.body)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
