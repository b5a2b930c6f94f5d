package remote

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestBatchItemsSeeEarlierItems: the operations of a batch commit
// together, and each sees what the ones before it wrote, as it did when
// each committed on its own: a create of a clientId an earlier operation
// created answers with that record, an update on the version an earlier
// one made applies, and one on the older version is refused (409, a
// final answer, stored) without stopping the rest. The batch resent
// replays each operation.
func TestBatchItemsSeeEarlierItems(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		ex := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"x","data":{"v":0},"baseVersion":0}`))
		body := fmt.Sprintf(`{"operations":[
			{"idempotencyKey":"%[1]s-1","method":"POST","path":"/v1/notes","body":{"clientId":"a","data":{"v":1}}},
			{"idempotencyKey":"%[1]s-2","method":"POST","path":"/v1/notes","body":{"clientId":"a","data":{"v":1}}},
			{"idempotencyKey":"%[1]s-3","method":"PATCH","path":"/v1/notes/%[2]s","body":{"data":{"v":3},"baseVersion":1}},
			{"idempotencyKey":"%[1]s-4","method":"PATCH","path":"/v1/notes/%[2]s","body":{"data":{"v":4},"baseVersion":1}},
			{"idempotencyKey":"%[1]s-5","method":"PATCH","path":"/v1/notes/%[2]s","body":{"data":{"v":5},"baseVersion":2}}]}`,
			newKey(), ex.ID)
		type res struct {
			Status   int
			Body     json.RawMessage
			Replayed bool
		}
		var first struct{ Results []res }
		r := h.must(t, "POST", "/v1/batch", "alice", "", body)
		if r.status != 200 || json.Unmarshal([]byte(r.body), &first) != nil || len(first.Results) != 5 {
			t.Fatalf("batch: %d %s", r.status, r.body)
		}
		for i, want := range []int{201, 200, 200, 409, 200} {
			if first.Results[i].Status != want {
				t.Fatalf("operation %d: %d %s, want %d", i, first.Results[i].Status, first.Results[i].Body, want)
			}
		}
		var created, again Entity
		json.Unmarshal(first.Results[0].Body, &created)
		json.Unmarshal(first.Results[1].Body, &again)
		if again.ID != created.ID {
			t.Fatalf("the second create of clientId a answered %s, not the record the first made (%s)", again.ID, created.ID)
		}
		if n := h.count(t, "alice", "notes", "a"); n != 1 {
			t.Fatalf("records of clientId a: %d", n)
		}
		if got := entityOf(t, h.must(t, "GET", "/v1/notes/"+ex.ID, "alice", "", "")); got.Version != 3 || string(got.Data) != `{"v":5}` {
			t.Fatalf("after the batch: version %d %s, want 3 {\"v\":5}", got.Version, got.Data)
		}
		var resent struct{ Results []res }
		r = h.must(t, "POST", "/v1/batch", "alice", "", body)
		if json.Unmarshal([]byte(r.body), &resent) != nil || len(resent.Results) != 5 {
			t.Fatalf("resent batch: %d %s", r.status, r.body)
		}
		for i := range first.Results {
			if !resent.Results[i].Replayed || string(resent.Results[i].Body) != string(first.Results[i].Body) {
				t.Fatalf("resent operation %d: replayed=%v %s, want %s", i, resent.Results[i].Replayed, resent.Results[i].Body, first.Results[i].Body)
			}
		}
	})
}
