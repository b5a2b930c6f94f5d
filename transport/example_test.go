package transport_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/syncd/syncd/transport"
)

// The daemon maps a queued operation onto a Request, sends it, and acts
// on the Decision.
func ExampleClient_Send() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"srv-1","clientId":"note-1"}`)
	}))
	defer srv.Close()

	c, err := transport.New(transport.Config{BaseURL: srv.URL})
	if err != nil {
		panic(err)
	}
	defer c.CloseIdleConnections()

	o := c.Send(context.Background(), transport.Request{
		OperationID:    "0195d3f2-7c1e-7000-8000-000000000001",
		Op:             transport.OpCreate,
		EntityType:     "notes",
		EntityID:       "note-1",
		Data:           []byte(`{"title":"groceries"}`),
		PayloadVersion: 1,
		Token:          "access-token-of-the-account",
	})
	fmt.Println(o.Decision, o.Status, o.ServerID, o.Replayed)
	// Output: done 201 srv-1 false
}

// A Retry outcome is scheduled by the Policy: never sooner than the
// server's Retry-After, and given up once the operation is too old to be
// resent safely.
func ExamplePolicy_Next() {
	var p transport.Policy // defaults
	created := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := created.Add(time.Hour)
	rnd := rand.New(rand.NewPCG(1, 1)).Int64N

	limited := transport.Outcome{Decision: transport.Retry, Code: transport.CodeRateLimited, RetryAfter: 30 * time.Second}
	at, giveUp, code := p.Next(limited, 0, created, now, rnd)
	fmt.Println(at.Sub(now), giveUp, code)

	late := now.Add(transport.DefaultMaxElapsed)
	_, giveUp, code = p.Next(limited, 40, created, late, rnd)
	fmt.Println(giveUp, code)
	// Output:
	// 30s false rate_limited
	// true retry_expired
}
