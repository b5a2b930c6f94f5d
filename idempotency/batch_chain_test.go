package idempotency

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBatchAfterWithoutGroups: "after" on the item-by-item path (no
// GroupStore): refused without Chain (400, and no "chains" in the
// capabilities); with Chain, run only after a 2xx, else 424, with the
// body Chain rewrote.
func TestBatchAfterWithoutGroups(t *testing.T) {
	t.Parallel()
	var bodies []string
	routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		if strings.Contains(string(b), `"fail"`) {
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":{"code":"version_conflict"}}`))
			return
		}
		var req struct{ Data json.RawMessage }
		json.Unmarshal(b, &req)
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"version":7,"data":` + string(req.Data) + `}`))
	})
	post := func(h http.Handler, body string) []BatchResult {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/batch", strings.NewReader(body)))
		var out struct{ Results []BatchResult }
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
			t.Fatalf("batch: %d %s", rec.Code, rec.Body)
		}
		return out.Results
	}
	ops := `{"operations":[
		{"idempotencyKey":"k1","method":"PATCH","path":"/v1/n/1","body":{"data":{"a":1},"baseVersion":6}},
		{"idempotencyKey":"k2","method":"PATCH","path":"/v1/n/1","body":{"data":{"a":2},"baseVersion":0},"after":0},
		{"idempotencyKey":"k3","method":"PATCH","path":"/v1/n/1","body":{"data":"fail","baseVersion":0},"after":1},
		{"idempotencyKey":"k4","method":"PATCH","path":"/v1/n/1","body":{"data":{"a":4},"baseVersion":0},"after":2}]}`

	plain := BatchConfig{Handler: routes}
	if _, ok := plain.Capabilities()["chains"]; ok {
		t.Fatal("capabilities advertise chains without Chain")
	}
	res := post(BatchHandler(plain), ops)
	if res[0].Status != 200 || res[1].Status != 400 || res[2].Status != 400 || res[3].Status != 400 {
		t.Fatalf("without Chain: %+v", res)
	}

	bodies = nil
	chained := BatchConfig{Handler: routes, Chain: ChainVersions}
	if chained.Capabilities()["chains"] != true {
		t.Fatal("capabilities do not advertise chains with Chain")
	}
	res = post(BatchHandler(chained), ops)
	for i, want := range []int{200, 200, 409, 424} {
		if res[i].Status != want {
			t.Fatalf("operation %d: %d %s, want %d", i, res[i].Status, res[i].Body, want)
		}
	}
	if len(bodies) != 3 || bodies[1] != `{"baseVersion":7,"data":{"a":2}}` {
		t.Fatalf("the handler saw %q; want the second made on version 7, the fourth not run", bodies)
	}
}
