package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/localapi/localapitest"
)

// UILink and StatusHistory against a real server; a daemon with the
// page off answers UILink not_found.
func TestClientUI(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	c := newClient(t, e.Addr)
	ctx := context.Background()
	before := time.Now()
	l, err := c.UILink(ctx)
	if err != nil || !strings.HasPrefix(l.URL, e.URL+"/ui/login?code=") || l.ExpiresAt.Before(before.Add(localapi.UILinkLifetime-time.Second)) {
		t.Fatalf("UILink: %+v, %v", l, err)
	}
	if _, err := c.Create(ctx, "note", "n1", map[string]any{"title": "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.History.Sample(); err != nil {
		t.Fatal(err)
	}
	h, err := c.StatusHistory(ctx)
	if err != nil || h.IntervalSeconds != 10 || len(h.Samples) != 1 || h.Samples[0].Queued != 1 || h.Samples[0].Pending != 1 || h.Samples[0].At.IsZero() {
		t.Fatalf("StatusHistory: %+v, %v", h, err)
	}

	off := localapitest.Start(t, localapitest.Options{Config: localapi.Config{UIOff: true}})
	if _, err := newClient(t, off.Addr).UILink(ctx); !client.IsCode(err, localapi.CodeNotFound) {
		t.Errorf("UILink with the page off: %v, want not_found", err)
	}
}
