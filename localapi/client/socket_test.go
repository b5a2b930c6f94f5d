//go:build linux || darwin

package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/localapi/localapitest"
)

// socketClient is a client of the env's Unix socket. Its Addr names a
// port nothing listens on: a request that went over TCP would fail.
func socketClient(t *testing.T, e *localapitest.Env, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Socket: e.Socket, Addr: "127.0.0.1:1", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// The client talks to a real server over its Unix socket: requests and
// the event stream. The token is checked there as on TCP.
func TestClientOverUnixSocket(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", UnixSocket: true})
	c := socketClient(t, e, localapitest.Token)
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil || st.AccountID != "alice" {
		t.Fatalf("status: %+v, %v", st, err)
	}
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Since: st.LastEventSeq, Types: []string{"entity."}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	n, err := c.Create(ctx, "note", "n1", map[string]any{"title": "milk"})
	if err != nil || n.ID != "n1" {
		t.Fatalf("create: %+v, %v", n, err)
	}
	if g, err := c.Get(ctx, "note", "n1"); err != nil || string(g.Data) != `{"title":"milk"}` {
		t.Fatalf("get: %+v, %v", g, err)
	}
	ev, err := sub.Next(ctx)
	if err != nil || ev.EntityID != "n1" {
		t.Fatalf("event: %+v, %v", ev, err)
	}

	bad := socketClient(t, e, "wrong-token")
	if _, err := bad.Status(ctx); !client.IsCode(err, localapi.CodeUnauthorized) {
		t.Errorf("status with a wrong token: %v; want unauthorized", err)
	}
	if _, err := bad.Subscribe(ctx, client.SubscribeOptions{}); !client.IsCode(err, localapi.CodeUnauthorized) {
		t.Errorf("subscribe with a wrong token: %v; want unauthorized", err)
	}
}

// An app's own HTTP client is used over the socket (its Timeout kept);
// one whose Transport the client cannot point at the socket is refused
// by New, not silently sent over TCP.
func TestClientSocketWithHTTPClient(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{UnixSocket: true})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	for _, hc := range []*http.Client{{Transport: tr}, {}} {
		c, err := client.New(client.Config{Socket: e.Socket, Addr: "127.0.0.1:1", Token: localapitest.Token, HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(context.Background()); err != nil {
			t.Errorf("status with HTTPClient %+v: %v", hc, err)
		}
		c.CloseIdleConnections()
	}
	_, err := client.New(client.Config{Socket: e.Socket, Token: localapitest.Token, HTTPClient: &http.Client{Transport: roundTripper{}}})
	if err == nil || !strings.Contains(err.Error(), "Socket") {
		t.Errorf("New with a custom RoundTripper: %v; want an error", err)
	}
}

type roundTripper struct{}

func (roundTripper) RoundTrip(*http.Request) (*http.Response, error) { panic("not used") }
