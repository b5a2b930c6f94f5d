//go:build linux

package localapi_test

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/localapitest"
)

// chromium returns the Chromium binary: $SYNCD_CHROMIUM, or chromium
// (Debian's package) or chromium-browser on PATH.
func chromium() (string, bool) {
	if p := os.Getenv("SYNCD_CHROMIUM"); p != "" {
		return p, true
	}
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// noChromium skips a browser test on a machine without Chromium, and
// fails it in CI (CI set, as .ci/run sets it), where a skipped browser
// test would pass unseen.
func noChromium(t *testing.T) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal("Chromium not found, and CI is set: .ci/run installs Debian's chromium package (or set SYNCD_CHROMIUM)")
	}
	t.Skip("Chromium not found (install Debian's chromium package, or set SYNCD_CHROMIUM): the browser test is skipped; .ci/run installs it")
}

// browserPage subscribes twice (token as a subprotocol, and as ?token=),
// writes one entity itself (a CORS request with the token), tells the
// test it is ready, and posts what each socket received once both have
// seen want events, or the first error.
var browserPage = template.Must(template.New("page").Parse(`<!doctype html>
<meta charset="utf-8"><title>syncd events</title>
<script>
const api = {{.API}}, token = {{.Token}}, since = {{.Since}}, want = {{.Want}};
const got = {protocol: [], query: []};
let reported = false;
function report(path, body) {
  return fetch(path, {method: "POST", body: JSON.stringify(body)});
}
function fail(what) {
  if (!reported) { reported = true; report("/report", {error: what}); }
}
function open(name, url, protocols) {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, protocols);
    ws.onopen = () => resolve(ws);
    ws.onerror = () => fail(name + ": WebSocket error");
    ws.onclose = (e) => fail(name + ": closed " + e.code + " " + e.reason);
    ws.onmessage = (m) => {
      got[name].push(JSON.parse(m.data));
      if (!reported && got.protocol.length >= want && got.query.length >= want) {
        reported = true;
        report("/report", got);
      }
    };
  });
}
(async () => {
  try {
    await open("protocol", "ws://" + api + "/v1/events?since=" + since, ["syncd.v1", "syncd.token." + token]);
    await open("query", "ws://" + api + "/v1/events?since=" + since + "&token=" + token);
    const res = await fetch("http://" + api + "/v1/entities/note", {
      method: "POST",
      headers: {"Authorization": "Bearer " + token, "Content-Type": "application/json"},
      body: JSON.stringify({id: "from-browser", data: {title: "written by the page"}}),
    });
    if (res.status !== 201) { fail("browser write: " + res.status + " " + await res.text()); return; }
    await report("/ready", {});
  } catch (e) {
    fail(String(e));
  }
})();
</script>`))

// A real browser (headless Chromium) opens a page served by the test,
// subscribes to /v1/events with the token, and sees the events of writes
// made through the API — its own (a CORS request) and the test's.
func TestBrowserEvents(t *testing.T) {
	t.Parallel()
	bin, ok := chromium()
	if !ok {
		noChromium(t)
	}

	// The page's own server; its origin is on the daemon's allowlist.
	pageLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + pageLn.Addr().String()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Config: localapi.Config{AllowedOrigins: []string{origin}}})
	since := e.Bus.LastSeq()
	const want = 6 // three creates: entity.changed and operation.state each

	ready := make(chan struct{})
	reports := make(chan []byte, 1)
	var readyOnce sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		browserPage.Execute(w, map[string]any{"API": e.Addr, "Token": localapitest.Token, "Since": since, "Want": want})
	})
	mux.HandleFunc("POST /ready", func(w http.ResponseWriter, r *http.Request) {
		readyOnce.Do(func() { close(ready) })
	})
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case reports <- b:
		default:
		}
	})
	mux.HandleFunc("GET /favicon.ico", http.NotFound)
	page := &http.Server{Handler: mux}
	go page.Serve(pageLn)
	defer page.Close()

	profile, err := os.MkdirTemp("", "syncd-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	var stderr strings.Builder
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--remote-debugging-port=0", origin+"/")
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helpers too are stopped at the end
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // our child's process group
		<-exited
	}()

	timeout := time.NewTimer(90 * time.Second)
	defer timeout.Stop()
	var report []byte
	select {
	case <-ready:
	case report = <-reports: // an error before it was ready
	case err := <-exited:
		t.Fatalf("chromium exited early: %v\n%s", err, stderr.String())
	case <-timeout.C:
		t.Fatalf("the page never subscribed\nchromium: %s", stderr.String())
	}
	if report == nil {
		for i := 1; i <= 2; i++ {
			api(t, e, "POST", "/v1/entities/note", fmt.Sprintf(`{"id":"n%d","data":{"title":"from the test"}}`, i))
		}
		select {
		case report = <-reports:
		case err := <-exited:
			t.Fatalf("chromium exited early: %v\n%s", err, stderr.String())
		case <-timeout.C:
			t.Fatalf("no report from the page\nchromium: %s", stderr.String())
		}
	}
	var got struct {
		Error    string
		Protocol []eventJSON
		Query    []eventJSON
	}
	if err := json.Unmarshal(report, &got); err != nil {
		t.Fatalf("report %s: %v", report, err)
	}
	if got.Error != "" {
		t.Fatalf("the page failed: %s\nchromium: %s", got.Error, stderr.String())
	}
	log := retained(t, e)
	for name, evs := range map[string][]eventJSON{"subprotocol": got.Protocol, "?token=": got.Query} {
		var ids []string
		for i, ev := range evs[:want] {
			w := log[since+uint64(i)] // log[k] has seq k+1
			if ev.Seq != w.Seq || ev.Type != w.Type || ev.EntityID != w.EntityID {
				t.Errorf("%s: event %d is %+v, want seq %d %s %s", name, i, ev, w.Seq, w.Type, w.EntityID)
			}
			if i%2 == 0 {
				ids = append(ids, ev.EntityID)
			}
		}
		if strings.Join(ids, ",") != "from-browser,n1,n2" {
			t.Errorf("%s: entities %v, want from-browser, n1, n2", name, ids)
		}
	}
	t.Logf("Chromium (%s) received %d events on each socket", bin, want)
}

type eventJSON struct {
	Seq      uint64 `json:"seq"`
	Type     string `json:"type"`
	EntityID string `json:"entityId"`
}
