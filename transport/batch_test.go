package transport

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestSendBatch: each item of a batch answer is classified as the same
// answer to the request alone would be; a whole-batch answer applies to
// every item; a remote without the route is ErrNoBatch.
func TestSendBatch(t *testing.T) {
	t.Parallel()
	answer := `{"results":[
		{"status":201,"body":{"id":"s1","version":1}},
		{"status":503,"body":{"error":{"code":"unavailable","message":"later"}}},
		{"status":429,"body":{"error":{"code":"rate_limited","message":"slow"}},"retryAfter":7},
		{"status":409,"body":{"error":{"code":"idempotency_in_flight","message":"busy"}},"retryAfter":1},
		{"status":400,"body":{"error":{"code":"validation","message":"bad"}}},
		{"status":200,"body":{"id":"s6","version":4},"replayed":true}]}`
	rm := newRemote(t, reply(200, answer))
	c := newClient(t, rm, Config{})
	req := func(id, op string) Request {
		r := Request{OperationID: id, Op: op, EntityType: "note", EntityID: "n-" + id, Data: json.RawMessage(`{"a":"<&>"}`), Token: "alice.1", ServerID: "s"}
		if op == OpDelete {
			r.Data = nil
		}
		return r
	}
	rs := []Request{req("k1", OpCreate), req("k2", OpUpdate), req("k3", OpUpdate), req("k4", OpCreate), req("k5", OpCreate),
		{OperationID: "bad\n", Op: OpCreate, EntityType: "note", EntityID: "x", Data: json.RawMessage(`{}`), Token: "alice.1"},
		req("k6", OpDelete)}
	outs, err := c.SendBatch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		d    Decision
		code string
	}{{Done, ""}, {Retry, CodeUnavailable}, {Retry, CodeRateLimited}, {Retry, CodeInFlight}, {NeedsUserAction, CodeValidation},
		{Permanent, CodeInvalidRequest}, {Done, ""}}
	for i, w := range want {
		if outs[i].Decision != w.d || outs[i].Code != w.code {
			t.Errorf("item %d: %v/%q, want %v/%q (%s)", i, outs[i].Decision, outs[i].Code, w.d, w.code, outs[i].Message)
		}
	}
	if outs[0].ServerID != "s1" || outs[0].ServerVersion != 1 || outs[2].RetryAfter.Seconds() != 7 || !outs[6].Replayed {
		t.Errorf("details: %+v / %+v / %+v", outs[0], outs[2], outs[6])
	}
	seen := rm.requests()
	if len(seen) != 1 || seen[0].RequestURI != "/v1/batch" || seen[0].Header.Get("Authorization") != "Bearer alice.1" ||
		!strings.Contains(string(seen[0].Body), `"idempotencyKey":"k1"`) || !strings.Contains(string(seen[0].Body), `<&>`) ||
		strings.Contains(string(seen[0].Body), "bad") {
		t.Fatalf("request: %s %s", seen[0].RequestURI, seen[0].Body)
	}

	// A whole-batch 503: every item retries.
	outs, err = newClient(t, newRemote(t, reply(503, "")), Config{}).SendBatch(context.Background(), rs[:2])
	if err != nil || outs[0].Decision != Retry || outs[1].Decision != Retry {
		t.Fatalf("whole-batch 503: %+v %v", outs, err)
	}
	// No route.
	if _, err := newClient(t, newRemote(t, reply(404, "")), Config{}).SendBatch(context.Background(), rs[:2]); !errors.Is(err, ErrNoBatch) {
		t.Fatalf("no route: %v", err)
	}
	// A 413 to a batch of several: nothing applied, no item failed for
	// it; to a batch of one: that operation is too large, as alone.
	var tooLarge *BatchTooLargeError
	if _, err := newClient(t, newRemote(t, reply(413, "")), Config{}).SendBatch(context.Background(), rs[:2]); !errors.As(err, &tooLarge) ||
		tooLarge.Operations != 2 || tooLarge.Bytes == 0 {
		t.Fatalf("whole-batch 413: %v", err)
	}
	outs, err = newClient(t, newRemote(t, reply(413, "")), Config{}).SendBatch(context.Background(), rs[:1])
	if err != nil || outs[0].Decision != NeedsUserAction || outs[0].Code != CodeRejected {
		t.Fatalf("413 to a batch of one: %+v %v", outs, err)
	}
	// A 200 that does not answer each item: retry, maybe applied.
	outs, _ = newClient(t, newRemote(t, reply(200, `{"results":[]}`)), Config{}).SendBatch(context.Background(), rs[:2])
	if outs[0].Decision != Retry {
		t.Fatalf("short answer: %+v", outs[0])
	}
	// Another account's token in one batch is refused.
	mixed := []Request{req("a", OpCreate), req("b", OpCreate)}
	mixed[1].Token = "bob.1"
	if _, err := c.SendBatch(context.Background(), mixed); err == nil {
		t.Fatal("a batch with two accounts' tokens was sent")
	}
}

// TestSendBatchChained: a chained update names the item before it
// ("after"), and is not sent when that one is not in the batch (not
// built, or itself not sent); the remote's 424 for it is
// CodeDependencyFailed, a retry with nothing done; a 424 to a request
// that was not chained is an ordinary refusal.
func TestSendBatchChained(t *testing.T) {
	t.Parallel()
	answer := `{"results":[
		{"status":200,"body":{"id":"s","version":2}},
		{"status":424,"body":{"error":{"code":"dependency_failed","message":"no"}}},
		{"status":424,"body":{"error":{"code":"dependency_failed","message":"no"}}}]}`
	rm := newRemote(t, reply(200, answer))
	c := newClient(t, rm, Config{})
	up := func(id string, chained bool) Request {
		return Request{OperationID: id, Op: OpUpdate, EntityType: "note", EntityID: "n", ServerID: "s", BaseVersion: 1,
			Data: json.RawMessage(`{}`), Token: "alice.1", Chained: chained}
	}
	bad := up("bad\n", false)
	rs := []Request{up("k1", false), up("k2", true), bad, up("k3", true), up("k4", true), up("k5", false)}
	outs, err := c.SendBatch(context.Background(), rs)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		d    Decision
		code string
	}{{Done, ""}, {Retry, CodeDependencyFailed}, {Permanent, CodeInvalidRequest}, {Retry, CodeDependencyFailed}, {Retry, CodeDependencyFailed}, {NeedsUserAction, CodeRejected}}
	for i, w := range want {
		if outs[i].Decision != w.d || outs[i].Code != w.code {
			t.Errorf("item %d: %v/%q, want %v/%q (%s)", i, outs[i].Decision, outs[i].Code, w.d, w.code, outs[i].Message)
		}
	}
	if outs[3].Sends != 0 || outs[4].Sends != 0 {
		t.Errorf("the unsent chained requests count sends: %d, %d", outs[3].Sends, outs[4].Sends)
	}
	var body struct {
		Operations []struct {
			IdempotencyKey string `json:"idempotencyKey"`
			After          *int   `json:"after"`
		} `json:"operations"`
	}
	seen := rm.requests()
	if err := json.Unmarshal(seen[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Operations) != 3 || body.Operations[0].After != nil || body.Operations[1].After == nil || *body.Operations[1].After != 0 ||
		body.Operations[2].IdempotencyKey != "k5" || body.Operations[2].After != nil {
		t.Fatalf("sent %s", seen[0].Body)
	}
}
