package remote

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestBatchChains: an update chained after another ("after") runs only
// when that one was applied as sent, made on the version it produced
// (ChainVersions): so a device's queued updates of one record travel in
// one batch. The chain replays item by item, and a chained update sent
// alone with the version it was chained on replays too (the same
// fingerprint). After a refused update the rest of the chain answers 424
// and stores nothing; after a merged one (another writer's field in the
// answer), too.
func TestBatchChains(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		if r := h.must(t, "GET", "/v1/capabilities", "alice", "", ""); !strings.Contains(r.body, `"chains":true`) {
			t.Fatalf("capabilities %s: no chains", r.body)
		}
		x := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"x","data":{"v":0,"w":0},"baseVersion":0}`))
		type res struct {
			Status   int
			Body     json.RawMessage
			Replayed bool
		}
		batch := func(body string, want ...int) []res {
			t.Helper()
			var out struct{ Results []res }
			r := h.must(t, "POST", "/v1/batch", "alice", "", body)
			if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil || len(out.Results) != len(want) {
				t.Fatalf("batch: %d %s", r.status, r.body)
			}
			for i, w := range want {
				if out.Results[i].Status != w {
					t.Fatalf("operation %d: %d %s, want %d", i, out.Results[i].Status, out.Results[i].Body, w)
				}
			}
			return out.Results
		}
		patch := func(key string, v, w, base int, after string) string {
			return fmt.Sprintf(`{"idempotencyKey":%q,"method":"PATCH","path":"/v1/notes/%s","body":{"data":{"v":%d,"w":%d},"paths":["/v"],"baseVersion":%d}%s}`,
				key, x.ID, v, w, base, after)
		}
		k := newKey()
		// A chain of three: the second and third made on the versions
		// the ones before them produce (sent with a base of 0, which the
		// chain replaces: alone, /v changed since 0 would conflict).
		chain := `{"operations":[` + patch(k+"1", 1, 0, 1, "") + "," + patch(k+"2", 2, 0, 0, `,"after":0`) + "," + patch(k+"3", 3, 0, 0, `,"after":1`) + `]}`
		first := batch(chain, 200, 200, 200)
		for i, want := range []int64{2, 3, 4} {
			if e := entityOf(t, result{status: 200, body: string(first[i].Body)}); e.Version != want {
				t.Fatalf("operation %d: version %d, want %d", i, e.Version, want)
			}
		}
		if got := entityOf(t, h.must(t, "GET", "/v1/notes/"+x.ID, "alice", "", "")); got.Version != 4 || string(got.Data) != `{"v":3,"w":0}` {
			t.Fatalf("after the chain: version %d %s", got.Version, got.Data)
		}
		again := batch(chain, 200, 200, 200)
		for i := range first {
			if !again[i].Replayed || string(again[i].Body) != string(first[i].Body) {
				t.Fatalf("resent chain, operation %d: replayed=%v %s, want %s", i, again[i].Replayed, again[i].Body, first[i].Body)
			}
		}
		// The third alone, as a client sends it once it has the second's
		// answer (base 3): a replay, not a 422.
		r := h.must(t, "PATCH", "/v1/notes/"+x.ID, "alice", k+"3", `{"data":{"v":3,"w":0},"paths":["/v"],"baseVersion":3}`)
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the chained update alone: %d %s (replayed %q)", r.status, r.body, r.header.Get("Idempotent-Replayed"))
		}

		// Another writer changes /v: the head conflicts, the rest is not run.
		h.must(t, "PATCH", "/v1/notes/"+x.ID, "alice", newKey(), `{"data":{"v":9,"w":0},"paths":["/v"],"baseVersion":4}`)
		k = newKey()
		res424 := batch(`{"operations":[`+patch(k+"1", 10, 0, 4, "")+","+patch(k+"2", 11, 0, 0, `,"after":0`)+","+patch(k+"3", 12, 0, 0, `,"after":1`)+`]}`, 409, 424, 424)
		if !strings.Contains(string(res424[1].Body), `"dependency_failed"`) {
			t.Fatalf("424 body %s", res424[1].Body)
		}
		// Nothing was stored for the 424's key: alone, on the record as
		// it is, it runs.
		if r := h.must(t, "PATCH", "/v1/notes/"+x.ID, "alice", k+"2", `{"data":{"v":11,"w":0},"paths":["/v"],"baseVersion":5}`); r.status != 200 || r.header.Get("Idempotent-Replayed") == "true" {
			t.Fatalf("the unrun update alone: %d %s", r.status, r.body)
		}

		// Another writer changes /w: the head merges (its answer holds
		// their w), so what follows it was not made on that answer.
		h.must(t, "PATCH", "/v1/notes/"+x.ID, "alice", newKey(), `{"data":{"v":11,"w":7},"paths":["/w"],"baseVersion":6}`)
		k = newKey()
		merged := batch(`{"operations":[`+patch(k+"1", 20, 0, 6, "")+","+patch(k+"2", 21, 0, 0, `,"after":0`)+`]}`, 200, 424)
		if !strings.Contains(string(merged[0].Body), `"w":7`) {
			t.Fatalf("the head's answer %s does not hold the other writer's field", merged[0].Body)
		}

		// after must name an earlier operation.
		k = newKey()
		batch(`{"operations":[`+patch(k+"1", 30, 7, 8, `,"after":0`)+","+patch(k+"2", 31, 7, 8, `,"after":5`)+`]}`, 400, 400)
	})
}
