package localapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/localapitest"
)

func postBatch(t *testing.T, e *localapitest.Env, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.URL+"/v1/batch", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+localapitest.Token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

// TestBatch: all or none with the failing write's index; per-write keys
// replay, alone or in a batch; the limits.
func TestBatch(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	defer http.DefaultClient.CloseIdleConnections()
	writes := func(bad bool) string {
		var ws []string
		for i := range 50 {
			ws = append(ws, fmt.Sprintf(`{"op":"create","type":"note","id":"n%02d","data":{"i":%d},"idempotencyKey":"k-%02d"}`, i, i, i))
		}
		if bad {
			ws[37] = `{"op":"create","type":"note","id":"n37","data":[1]}`
		}
		ws = append(ws, `{"op":"update","type":"note","id":"n01","data":{"j":1}}`)
		return `{"writes":[` + strings.Join(ws, ",") + `]}`
	}
	code, m := postBatch(t, e, writes(true))
	errObj, _ := m["error"].(map[string]any)
	if code != 400 || errObj["index"] != float64(37) || errObj["code"] != localapi.CodeInvalidRequest {
		t.Fatalf("bad batch: %d %v", code, m)
	}
	if st, _ := e.Store.Stats(); st.Counts["pending"] != 0 {
		t.Fatalf("a refused batch wrote %v", st.Counts)
	}
	code, m = postBatch(t, e, writes(false))
	results, _ := m["results"].([]any)
	if code != 200 || len(results) != 51 {
		t.Fatalf("batch: %d %v", code, m)
	}
	if r := results[50].(map[string]any); r["id"] != "n01" || r["version"] != float64(2) || r["operationId"] == "" {
		t.Fatalf("last result %v", r)
	}
	// k-05 sent alone with the same write: the batch's answer.
	req, _ := http.NewRequest("POST", e.URL+"/v1/entities/note", strings.NewReader(`{"id":"n05","data":{"i":5}}`))
	req.Header.Set("Authorization", "Bearer "+localapitest.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-05")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the batch's key sent alone: %d replayed=%q", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
	}
	// The same key with another write: 422 with its index.
	code, m = postBatch(t, e, `{"writes":[{"op":"create","type":"note","id":"other","data":{}},{"op":"create","type":"note","id":"n05","data":{"i":6},"idempotencyKey":"k-05"}]}`)
	if errObj, _ := m["error"].(map[string]any); code != 422 || errObj["index"] != float64(1) {
		t.Fatalf("reused key: %d %v", code, m)
	}
	for _, tt := range []struct {
		name, body string
		code       int
	}{
		{"no writes", `{"writes":[]}`, 400},
		{"unknown op", `{"writes":[{"op":"upsert","type":"note","id":"x","data":{}}]}`, 400},
		{"delete with data", `{"writes":[{"op":"delete","type":"note","id":"n00","data":{}}]}`, 400},
		{"update without id", `{"writes":[{"op":"update","type":"note","data":{}}]}`, 400},
		{"ordered not a bool", `{"writes":[{"op":"create","type":"note","data":{}}],"ordered":"yes"}`, 400},
		{"unknown member", `{"writes":[{"op":"create","type":"note","data":{},"x":1}]}`, 400},
		{"missing entity", `{"writes":[{"op":"delete","type":"note","id":"nope"}]}`, 404},
		{"too many", `{"writes":[` + strings.Repeat(`{"op":"create","type":"note","data":{}},`, 1000) + `{"op":"create","type":"note","data":{}}]}`, 400},
		{"too large", `{"writes":[{"op":"create","type":"note","data":{"x":"` + strings.Repeat("x", localapi.DefaultMaxBatchBytes) + `"}}]}`, 413},
	} {
		if code, m := postBatch(t, e, tt.body); code != tt.code {
			t.Errorf("%s: %d %v, want %d", tt.name, code, m, tt.code)
		}
	}
	if st, _ := e.Store.Stats(); st.Counts["pending"] != 51 {
		t.Fatalf("counts after the refused batches: %v", st.Counts)
	}
}
