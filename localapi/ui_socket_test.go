//go:build linux || darwin

package localapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/localapitest"
)

// A sign-in link asked for over the Unix socket names the loopback TCP
// listener Run serves, where a browser opens it; the page's session
// then works on both listeners. GET /v1/status/history serves the
// daemon's samples.
func TestUILinkOverSocket(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{UnixSocket: true, Account: "acct-sock"})
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", e.Socket)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	sock := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tcp := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	do := func(c *http.Client, method, u string, h map[string]string) (*http.Response, string) {
		t.Helper()
		r, err := http.NewRequest(method, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			r.Header.Set(k, v)
		}
		res, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	admin := map[string]string{"Authorization": "Bearer " + localapitest.Token}
	res, body := do(sock, "POST", "http://syncd/v1/ui/links", admin)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/ui/links over the socket: %d %s", res.StatusCode, body)
	}
	var link struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(body), &link); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link.URL, e.URL+"/ui/login?code=") {
		t.Fatalf("link %q, want one on %s", link.URL, e.URL)
	}
	res, body = do(tcp, "GET", link.URL, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("open the link: %d %s", res.StatusCode, body)
	}
	var session string
	for _, c := range res.Cookies() {
		if c.Name == localapi.UICookieName {
			session = c.Value
		}
	}
	if session == "" {
		t.Fatal("no session cookie")
	}
	cookie := map[string]string{"Cookie": localapi.UICookieName + "=" + session}
	for _, c := range []struct {
		name   string
		client *http.Client
		base   string
	}{{"TCP", tcp, e.URL}, {"socket", sock, "http://syncd"}} {
		res, body := do(c.client, "GET", c.base+"/ui/api/v1/status", cookie)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, "acct-sock") {
			t.Errorf("%s: GET /ui/api/v1/status: %d %s", c.name, res.StatusCode, body)
		}
	}

	// The history Env serves.
	if _, err := e.History.Sample(); err != nil {
		t.Fatal(err)
	}
	res, body = do(tcp, "GET", e.URL+"/ui/api/v1/status/history", cookie)
	var h struct {
		Interval int `json:"interval_seconds"`
		Samples  []struct {
			Queued int `json:"queued"`
		} `json:"samples"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || res.StatusCode != http.StatusOK || h.Interval != 10 || len(h.Samples) != 1 {
		t.Errorf("history: %d %s", res.StatusCode, body)
	}
	if u, _ := url.Parse(link.URL); u.Hostname() != "127.0.0.1" {
		t.Errorf("link host %q", u.Hostname())
	}
}
