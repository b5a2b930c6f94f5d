//go:build linux

package localapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/clocktest"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/localapitest"
)

// Attacks on the status page's sign-in (docs/ui.md), as an attacker
// makes them: real daemons served with Run on loopback, raw HTTP (bytes
// written to a TCP connection where a Go client would tidy the request)
// and, where a browser's rules matter, headless Chromium visiting a
// foreign page served on another loopback port.

// atkLog collects the daemon's log lines.
type atkLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *atkLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *atkLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type atk struct {
	t     *testing.T
	env   *localapitest.Env
	clock *clocktest.Clock
	log   *atkLog
	// seen collects every answer's headers and body, to look for secrets.
	seenMu sync.Mutex
	seen   bytes.Buffer
}

func startAtk(t *testing.T, o localapitest.Options) *atk {
	t.Helper()
	a := &atk{t: t, clock: clocktest.At(time.Now()), log: &atkLog{}}
	o.Config.Now = a.clock.Now
	o.Config.Logger = slog.New(slog.NewTextHandler(a.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.Account == "" {
		o.Account = "acct-atk"
	}
	a.env = localapitest.Start(t, o)
	return a
}

type atkResp struct {
	status int
	header http.Header
	body   string
}

func (r atkResp) code() string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(r.body), &b)
	return b.Error.Code
}

func (r atkResp) String() string {
	b := r.body
	if len(b) > 300 {
		b = b[:300] + "…"
	}
	return fmt.Sprintf("%d %s", r.status, strings.TrimSpace(b))
}

// raw writes req (a request line and headers, "\n" turned into CRLF,
// the blank line added) and body on a new connection and reads the
// answer.
func (a *atk) raw(req, body string) atkResp {
	a.t.Helper()
	c, err := net.DialTimeout("tcp", a.env.Addr, 10*time.Second)
	if err != nil {
		a.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	msg := strings.ReplaceAll(strings.TrimRight(req, "\n"), "\n", "\r\n") + "\r\n"
	if body != "" {
		msg += fmt.Sprintf("Content-Length: %d\r\n", len(body))
	}
	msg += "Connection: close\r\n\r\n" + body
	if _, err := io.WriteString(c, msg); err != nil {
		a.t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		a.t.Fatalf("%q: %v", req, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a.remember(res.Header, b)
	return atkResp{res.StatusCode, res.Header, string(b)}
}

func (a *atk) remember(h http.Header, b []byte) {
	a.seenMu.Lock()
	defer a.seenMu.Unlock()
	_ = h.Write(&a.seen)
	a.seen.Write(b)
}

// do sends a request with exactly the headers h (several values of one
// name go as several lines), never following a redirect.
func (a *atk) do(method, path string, h http.Header, body string) atkResp {
	a.t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	hr, err := http.NewRequest(method, a.env.URL+path, rb)
	if err != nil {
		a.t.Fatal(err)
	}
	for k, vs := range h {
		if strings.EqualFold(k, "Host") {
			hr.Host = vs[0]
			continue
		}
		hr.Header[http.CanonicalHeaderKey(k)] = vs
	}
	if body != "" && hr.Header.Get("Content-Type") == "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(hr)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a.remember(res.Header, b)
	return atkResp{res.StatusCode, res.Header, string(b)}
}

func admin() http.Header { return http.Header{"Authorization": {"Bearer " + localapitest.Token}} }

// page is the headers of the page's own request: the session cookie,
// and for a write its Origin and CSRF token.
func (a *atk) page(sess, csrf string) http.Header {
	h := http.Header{"Cookie": {localapi.UICookieName + "=" + sess}}
	if csrf != "" {
		h.Set("Origin", a.env.URL)
		h.Set(localapi.HeaderCSRFToken, csrf)
	}
	return h
}

// link makes a sign-in link with the admin token; it returns the code.
func (a *atk) link() string {
	a.t.Helper()
	r := a.do("POST", "/v1/ui/links", admin(), "")
	if r.status != http.StatusCreated {
		a.t.Fatalf("POST /v1/ui/links: %s", r)
	}
	return codeOf(a.t, r)
}

func codeOf(t *testing.T, r atkResp) string {
	t.Helper()
	var l struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(r.body), &l); err != nil {
		t.Fatalf("link answer %s: %v", r, err)
	}
	u, err := url.Parse(l.URL)
	if err != nil || u.Query().Get("code") == "" {
		t.Fatalf("link %q", l.URL)
	}
	return u.Query().Get("code")
}

// redeem opens /ui/login?code= and returns the session cookie's value
// ("" when refused).
func (a *atk) redeem(code string) string {
	a.t.Helper()
	r := a.do("GET", "/ui/login?code="+url.QueryEscape(code), nil, "")
	if r.status != http.StatusSeeOther {
		return ""
	}
	for _, line := range r.header.Values("Set-Cookie") {
		if c, err := http.ParseSetCookie(line); err == nil && c.Name == localapi.UICookieName {
			return c.Value
		}
	}
	a.t.Fatalf("303 without the cookie: %v", r.header)
	return ""
}

func (a *atk) signIn() string {
	a.t.Helper()
	s := a.redeem(a.link())
	if s == "" {
		a.t.Fatal("a fresh link did not sign in")
	}
	return s
}

func (a *atk) csrf(sess string) string {
	a.t.Helper()
	r := a.do("GET", "/ui/session", a.page(sess, ""), "")
	var s struct {
		CSRF string `json:"csrf_token"`
	}
	if err := json.Unmarshal([]byte(r.body), &s); r.status != http.StatusOK || err != nil || s.CSRF == "" {
		a.t.Fatalf("GET /ui/session: %s", r)
	}
	return s.CSRF
}

func (a *atk) alive(sess string) bool {
	a.t.Helper()
	return a.do("GET", "/ui/api/v1/status", a.page(sess, ""), "").status == http.StatusOK
}

func (a *atk) noteExists(id string) bool {
	a.t.Helper()
	return a.do("GET", "/v1/entities/note/"+id, admin(), "").status == http.StatusOK
}

func (a *atk) appNames() string {
	a.t.Helper()
	return a.do("GET", "/v1/apps", admin(), "").body
}

func (a *atk) wsURL(path string) string { return "ws" + strings.TrimPrefix(a.env.URL, "http") + path }

// 20 goroutines redeem one code at once, each on its own connection:
// exactly one session.
func TestUIAttackConcurrentRedeem(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	for round := range 3 {
		code := a.link()
		const n = 20
		var wg sync.WaitGroup
		start := make(chan struct{})
		statuses := make([]int, n)
		cookies := make([]string, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tr := &http.Transport{DisableKeepAlives: true}
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
				res, err := c.Get(a.env.URL + "/ui/login?code=" + code)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				statuses[i] = res.StatusCode
				for _, ck := range res.Cookies() {
					if ck.Name == localapi.UICookieName {
						cookies[i] = ck.Value
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, st := range statuses {
			switch st {
			case http.StatusSeeOther:
				won++
				if cookies[i] == "" || !a.alive(cookies[i]) {
					t.Errorf("round %d: the winner's cookie %q does not work", round, cookies[i])
				}
			case http.StatusForbidden:
				if cookies[i] != "" {
					t.Errorf("round %d: a refused redeem set a cookie", round)
				}
			default:
				t.Errorf("round %d: redeem answered %d", round, st)
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d of %d concurrent redeems of one code signed in, want exactly 1", round, won, n)
		}
	}
}

// Was a break, fixed: a session of the page makes sign-in links through
// /ui/api/v1/ui/links (the route is the admin token's; a session is
// dispatched as the admin). A stolen cookie (docs/ui.md: a server on
// another loopback port receives it) so becomes sessions without end:
// each new one lasts 12 hours from its own sign-in, and signing the
// stolen one out, or its expiry, does not end them.
func TestUIAttackSessionMintsLinks(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	victim := a.signIn()
	csrf := a.csrf(victim)

	r := a.do("POST", "/ui/api/v1/ui/links", a.page(victim, csrf), "")
	if r.status == http.StatusCreated {
		t.Errorf("POST /ui/api/v1/ui/links with a session (Origin + CSRF token): %s; want a refusal (403): a session must not make sign-in links", r)
	} else {
		return // held
	}
	// What the break gives: a session of its own, outliving the stolen one.
	stolen := a.redeem(codeOf(t, r))
	if stolen == "" {
		t.Fatal("the minted link did not sign in")
	}
	if out := a.do("POST", "/ui/logout", a.page(victim, csrf), ""); out.status != http.StatusNoContent {
		t.Fatalf("logout: %s", out)
	}
	if a.alive(victim) {
		t.Fatal("logout left the victim's session")
	}
	// Renew before each expiry: alive 36 h after the only real sign-in.
	cur := stolen
	for range 3 {
		a.clock.Advance(localapi.UISessionLifetime - time.Minute)
		r := a.do("POST", "/ui/api/v1/ui/links", a.page(cur, a.csrf(cur)), "")
		if r.status != http.StatusCreated {
			t.Fatalf("renewing: %s", r)
		}
		cur = a.redeem(codeOf(t, r))
	}
	a.clock.Advance(2 * time.Minute)
	if a.alive(cur) {
		t.Errorf("a session derived from one signed out %v ago is still live: the 12 h lifetime and the sign-out do not bound a stolen cookie", 3*(localapi.UISessionLifetime-time.Minute)+2*time.Minute)
	}
}

// Was a break, fixed: with a session (a stolen cookie) the 16-link limit locks
// `syncd ui` out, and the 32-session limit signs the user's page out.
func TestUIAttackSessionLocksOutSyncdUI(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	user := a.signIn()
	a.clock.Advance(time.Second) // the user's session expires first
	thief := a.signIn()
	tcsrf := a.csrf(thief)
	var codes []string
	for range localapi.MaxUILinks {
		if r := a.do("POST", "/ui/api/v1/ui/links", a.page(thief, tcsrf), ""); r.status == http.StatusCreated {
			codes = append(codes, codeOf(t, r))
		}
	}
	if len(codes) > 0 {
		if r := a.do("POST", "/v1/ui/links", admin(), ""); r.status == http.StatusTooManyRequests {
			t.Errorf("after %d links made by a session, `syncd ui` (POST /v1/ui/links, admin token) gets %s: a session locks sign-in out (for 60 s, again and again)", len(codes), r)
		}
	}
	// 31 more sessions from links the thief makes.
	for _, c := range codes {
		a.redeem(c)
	}
	for range localapi.MaxUISessions - 1 - len(codes) {
		r := a.do("POST", "/ui/api/v1/ui/links", a.page(thief, tcsrf), "")
		if r.status != http.StatusCreated {
			break
		}
		a.redeem(codeOf(t, r))
	}
	if !a.alive(user) {
		t.Errorf("the user's page was signed out by sessions a session made (MaxUISessions=%d, the oldest is ended)", localapi.MaxUISessions)
	}
}

// Was a break, fixed: cookie tossing with paths. A server on another loopback port
// sets syncd_ui cookies with paths longer than /ui/: the browser sends
// them before the real one, and only the first four were looked at
// (maxUICookies), so five signed the page out of /ui/api/v1/status;
// now every one is.
// docs/ui.md says tossed cookies do not sign the page out.
func TestUIAttackCookieTossingPaths(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	sess := a.signIn()
	// What a browser sends for /ui/api/v1/status after the tossing
	// below: longest path first (RFC 6265 5.4).
	tossed := "syncd_ui=t1; syncd_ui=t2; syncd_ui=t3; syncd_ui=t4; syncd_ui=t5; "
	r := a.do("GET", "/ui/api/v1/status", http.Header{"Cookie": {tossed + localapi.UICookieName + "=" + sess}}, "")
	if r.status != http.StatusOK {
		t.Errorf("the live session after 5 tossed cookies: %s, want 200", r)
	}
	// A thousand bogus cookies are refused, and quickly (bounded work).
	many := strings.Repeat("syncd_ui=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA; ", 1000)
	start := time.Now()
	if r := a.do("GET", "/ui/api/v1/status", http.Header{"Cookie": {many}}, ""); r.status != http.StatusUnauthorized {
		t.Errorf("1000 bogus cookies: %s", r)
	}
	t.Logf("1000 bogus cookies refused in %v", time.Since(start))
}

// The answers a foreign page could frame or a proxy could keep: the
// page, the sign-in answers (303 and 403) and the sign-in-needed page
// carry the framing, caching and referrer rules.
func TestUIAttackFramingAndReferrer(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	sess := a.signIn()
	code := a.link()
	for name, r := range map[string]atkResp{
		"login 303":          a.do("GET", "/ui/login?code="+code, nil, ""),
		"login 403":          a.do("GET", "/ui/login?code="+code, nil, ""),
		"the page":           a.do("GET", "/ui/", a.page(sess, ""), ""),
		"the sign-in page":   a.do("GET", "/ui/", nil, ""),
		"an asset":           a.do("GET", "/ui/assets/app.js", a.page(sess, ""), ""),
		"the session":        a.do("GET", "/ui/session", a.page(sess, ""), ""),
		"an API answer":      a.do("GET", "/ui/api/v1/status", a.page(sess, ""), ""),
		"a refused API call": a.do("GET", "/ui/api/v1/status", nil, ""),
	} {
		if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("Cache-Control") != "no-store" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Frame-Options %q, Cache-Control %q, nosniff %q", name, r.header.Get("X-Frame-Options"), r.header.Get("Cache-Control"), r.header.Get("X-Content-Type-Options"))
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") && csp != "default-src 'none'" {
			t.Errorf("%s: CSP %q lets it be framed", name, csp)
		}
		if strings.HasPrefix(name, "login") && r.header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: Referrer-Policy %q", name, r.header.Get("Referrer-Policy"))
		}
		if r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s: CORS headers %v", name, r.header)
		}
	}
}

// Odd bytes and long values in the code, the cookie and the CSRF token.
func TestUIAttackOddValues(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	code := a.link()
	for _, q := range []string{
		"code=%00", "code=%FF%FE", "code=%E2%80%AE" + code, "code=" + code + "%00", "code=" + code + "%20",
		"code=" + strings.ToUpper(code), "code=" + strings.Repeat("A", 200000), "code[]=" + code, "Code=" + code,
		"code=" + url.QueryEscape(" "+code), "code=%" + code,
	} {
		r := a.raw("GET /ui/login?"+q+" HTTP/1.1\nHost: "+a.env.Addr, "")
		if r.status == http.StatusSeeOther || r.header.Get("Set-Cookie") != "" {
			t.Errorf("GET /ui/login?%.60s: %s, signed in", q, r)
		}
	}
	// The real code was not used up by the near misses.
	if a.redeem(code) == "" {
		t.Error("the code was used up by a refused near miss")
	}
	// A duplicate code parameter: the first one counts; a wrong one
	// first does not use the right one up.
	code = a.link()
	if r := a.raw("GET /ui/login?code=x&code="+code+" HTTP/1.1\nHost: "+a.env.Addr, ""); r.status != http.StatusForbidden {
		t.Errorf("code=x&code=<valid>: %s", r)
	}
	if a.redeem(code) == "" {
		t.Error("code=x&code=<valid> used the valid code up")
	}
	sess := a.signIn()
	csrf := a.csrf(sess)
	for name, ck := range map[string]string{
		"a NUL after the id":   localapi.UICookieName + "=" + sess + "\x00",
		"quoted id":            localapi.UICookieName + `="` + sess + `x"`,
		"100 KB":               localapi.UICookieName + "=" + strings.Repeat("A", 100000),
		"the CSRF token":       localapi.UICookieName + "=" + csrf,
		"the admin token":      localapi.UICookieName + "=" + localapitest.Token,
		"the id with a suffix": localapi.UICookieName + "=" + sess + "A",
		"the id, uppercased":   localapi.UICookieName + "=" + strings.ToUpper(sess),
		"other name":           "SYNCD_UI=" + sess,
	} {
		r := a.raw("GET /ui/api/v1/status HTTP/1.1\nHost: "+a.env.Addr+"\nCookie: "+ck, "")
		if r.status == http.StatusOK {
			t.Errorf("cookie %s: %s", name, r)
		}
	}
	for name, tok := range map[string]string{
		"64 KB":          strings.Repeat("A", 65536),
		"a prefix":       csrf[:len(csrf)-1],
		"the session id": sess,
	} {
		h := a.page(sess, csrf)
		h.Set(localapi.HeaderCSRFToken, tok)
		if r := a.do("POST", "/ui/api/v1/entities/note", h, `{"id":"odd","data":{}}`); r.status != http.StatusForbidden {
			t.Errorf("CSRF token %s: %s", name, r)
		}
	}
	// A NUL after the token (a Go client would not send it).
	if r := a.raw("POST /ui/api/v1/entities/note HTTP/1.1\nHost: "+a.env.Addr+"\nCookie: "+localapi.UICookieName+"="+sess+"\nOrigin: "+a.env.URL+"\nContent-Type: application/json\n"+localapi.HeaderCSRFToken+": "+csrf+"\x00", `{"id":"odd","data":{}}`); r.status != http.StatusForbidden && r.status != http.StatusBadRequest {
		t.Errorf("CSRF token with a NUL: %s", r)
	}
	// Two X-CSRF-Token headers, a wrong one first: refused.
	h := a.page(sess, csrf)
	h[http.CanonicalHeaderKey(localapi.HeaderCSRFToken)] = []string{"wrong", csrf}
	if r := a.do("POST", "/ui/api/v1/entities/note", h, `{"id":"odd","data":{}}`); r.status != http.StatusForbidden {
		t.Errorf("two CSRF headers, wrong first: %s", r)
	}
	if a.noteExists("odd") {
		t.Error("a refused write wrote")
	}
}

// Origin and Host variants on a write with a valid session and CSRF
// token.
func TestUIAttackOriginHost(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	sess := a.signIn()
	csrf := a.csrf(sess)
	_, port, _ := net.SplitHostPort(a.env.Addr)
	own := a.env.URL
	cookie := localapi.UICookieName + "=" + sess
	write := func(host string, origins ...string) atkResp {
		t.Helper()
		req := "POST /ui/api/v1/entities/note HTTP/1.1\nHost: " + host + "\nCookie: " + cookie + "\n" + localapi.HeaderCSRFToken + ": " + csrf + "\nContent-Type: application/json"
		for _, o := range origins {
			req += "\nOrigin: " + o
		}
		return a.raw(req, `{"data":{"title":"x"}}`)
	}
	refused := []struct {
		name, host string
		origins    []string
	}{
		{"two Origin headers, both the page's", a.env.Addr, []string{own, own}},
		{"two Origin headers, foreign first", a.env.Addr, []string{"http://evil.example", own}},
		{"Origin null", a.env.Addr, []string{"null"}},
		{"Origin with a trailing slash", a.env.Addr, []string{own + "/"}},
		{"Origin with a path", a.env.Addr, []string{own + "/ui/"}},
		{"Origin with userinfo", a.env.Addr, []string{"http://evil@" + a.env.Addr}},
		{"Origin https", a.env.Addr, []string{"https://" + a.env.Addr}},
		{"Origin ws", a.env.Addr, []string{"ws://" + a.env.Addr}},
		{"Origin without the port", a.env.Addr, []string{"http://127.0.0.1"}},
		{"Origin :80", a.env.Addr, []string{"http://127.0.0.1:80"}},
		{"Origin a suffix of the host", a.env.Addr, []string{own + ".evil.example"}},
		{"Origin localhost for Host 127.0.0.1", a.env.Addr, []string{"http://localhost:" + port}},
		{"Origin empty", a.env.Addr, []string{""}},
		{"Host :80, Origin without port", "127.0.0.1:80", []string{"http://127.0.0.1"}},
		{"Host with a trailing dot", "localhost.:" + port, []string{"http://localhost.:" + port}},
		{"Host IPv4 with a trailing dot", "127.0.0.1.:" + port, []string{"http://127.0.0.1.:" + port}},
		{"Host a rebound name", "evil.example:" + port, []string{"http://evil.example:" + port}},
		{"Host with userinfo", "127.0.0.1:" + port + "@evil.example", []string{"http://127.0.0.1:" + port + "@evil.example"}},
		{"Host 0.0.0.0", "0.0.0.0:" + port, []string{"http://0.0.0.0:" + port}},
		{"Host decimal 127.0.0.1", "2130706433:" + port, []string{"http://2130706433:" + port}},
		{"Host no Origin at all", a.env.Addr, nil},
	}
	for _, tc := range refused {
		r := write(tc.host, tc.origins...)
		if r.status != http.StatusForbidden && r.status != http.StatusBadRequest {
			t.Errorf("%s: %s, want 403", tc.name, r)
		}
	}
	// Loopback names and the page's own origin as the browser would
	// send it for them are the page's own: accepted (a loopback Host is
	// the only one served, and a client outside a browser may claim any
	// Origin anyway).
	for _, tc := range []struct{ name, host, origin string }{
		{"[::1]", "[::1]:" + port, "http://[::1]:" + port},
		{"localhost", "localhost:" + port, "http://localhost:" + port},
		{"LOCALHOST, origin lowercase", "LOCALHOST:" + port, "http://localhost:" + port},
		{"127.0.0.2", "127.0.0.2:" + port, "http://127.0.0.2:" + port},
		{"IPv4-mapped ::ffff:127.0.0.1 (loopback; no DNS name rebinds to it)", "[::ffff:127.0.0.1]:" + port, "http://[::ffff:127.0.0.1]:" + port},
	} {
		if r := write(tc.host, tc.origin); r.status != http.StatusCreated {
			t.Errorf("%s: %s, want 201", tc.name, r)
		}
	}
	// A CORS preflight from a foreign origin: no CORS headers, 403.
	r := a.raw("OPTIONS /ui/api/v1/entities/note HTTP/1.1\nHost: "+a.env.Addr+"\nOrigin: http://127.0.0.1:1\nAccess-Control-Request-Method: POST\nAccess-Control-Request-Headers: x-csrf-token, content-type", "")
	if r.status != http.StatusForbidden || r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("preflight from another port: %s %v", r, r.header)
	}
	// Even the page's own origin gets no CORS answer (it needs none).
	r = a.raw("OPTIONS /ui/api/v1/entities/note HTTP/1.1\nHost: "+a.env.Addr+"\nOrigin: "+own+"\nAccess-Control-Request-Method: POST", "")
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from the page's origin got CORS headers: %v", r.header)
	}
}

// Path tricks: without a session nothing answers 200; with the session
// cookie alone (no token), no path outside /ui/ is reached, and a path
// that cleans to another is refused.
func TestUIAttackPaths(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	if r := a.do("POST", "/v1/entities/note", admin(), `{"id":"secret-note","data":{"title":"secret title"}}`); r.status != http.StatusCreated {
		t.Fatal(r)
	}
	sess := a.signIn()
	cookie := "\nCookie: " + localapi.UICookieName + "=" + sess
	tricky := []string{
		"/ui/api/../v1/apps", "/ui/api/%2e%2e/v1/apps", "/ui/api/%2E%2E/v1/apps", "/ui/./api/v1/apps",
		"/ui/api/v1/../v1/apps", "/ui/api//v1/apps", "/ui//api/v1/apps", "//ui/api/v1/apps",
		"/UI/api/v1/apps", "/Ui/api/v1/apps", "/ui/API/v1/apps", "/ui/api", "/ui/apiv1/apps", "/ui/api%2Fv1/apps",
		"/ui/api/v1%2Fapps", "/ui/api/v1/apps/", "/ui/api/v1/entities/note/%2e%2e", "/ui/api/v1/entities/note/secret-note/..",
		"/ui/assets/../session", "/ui/assets/%2e%2e/session", "/ui/assets/..%2fsession", "/ui/assets/a%2f..%2f..%2fsession",
		"/ui/assets/%2e%2e%2f%2e%2e%2fapi%2fv1%2fapps", "/ui/api/ui/api/v1/apps", "/ui/api/ui/session", "/ui/api/ui/login?code=x",
		"/ui/%2e%2e/v1/apps", "/ui/../v1/apps", "/ui/..%2fv1/apps", "/v1/../ui/api/v1/apps", "/ui/api/v1/apps;x", "/ui/api/v1/apps%00",
		"/ui/api/v1/apps%20", "/ui\\api\\v1\\apps", "/ui/api/v1/status/history/", "/ui/api/v1/events",
	}
	for _, p := range tricky {
		r := a.raw("GET "+p+" HTTP/1.1\nHost: "+a.env.Addr, "")
		if r.status == http.StatusOK || strings.Contains(r.body, "secret title") || strings.Contains(r.body, "acct-atk") {
			t.Errorf("no session: GET %s: %s", p, r)
		}
		// With the bearer token but no cookie: /ui/ does not take it.
		r = a.raw("GET "+p+" HTTP/1.1\nHost: "+a.env.Addr+"\nAuthorization: Bearer "+localapitest.Token, "")
		if r.status == http.StatusOK && strings.HasPrefix(p, "/ui") {
			t.Errorf("bearer token on GET %s: %s", p, r)
		}
		// With the cookie: no 200 unless the path is exactly an API
		// path under /ui/api/ (as %2F-decoded; the mux sees the same).
		r = a.raw("GET "+p+" HTTP/1.1\nHost: "+a.env.Addr+cookie, "")
		if r.status == http.StatusOK {
			u, _ := url.Parse(p)
			if u.Path != "/ui/api/v1/apps" {
				t.Errorf("session: GET %s: %s", p, r)
			}
		}
	}
	// The absolute form of the request line names the Host.
	r := a.raw("GET http://evil.example/ui/api/v1/status HTTP/1.1\nHost: "+a.env.Addr+cookie, "")
	if r.status != http.StatusForbidden {
		t.Errorf("absolute-form request to evil.example: %s", r)
	}
	// An asterisk request: net/http answers it itself (200, empty),
	// before the guard; it carries nothing.
	if r := a.raw("OPTIONS * HTTP/1.1\nHost: "+a.env.Addr+cookie, ""); r.body != "" {
		t.Errorf("OPTIONS *: %s", r)
	}
}

// Method tricks on writes, with the session cookie and the page's own
// Origin but no CSRF token (what a form or a no-cors fetch can do).
func TestUIAttackMethods(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	sess := a.signIn()
	cookie := "\nCookie: " + localapi.UICookieName + "=" + sess
	host := "Host: " + a.env.Addr
	origin := "\nOrigin: " + a.env.URL
	body := `{"id":"m1","data":{"title":"x"}}`
	for _, req := range []string{
		"HEAD /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + origin,
		"HEAD /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie,
		"GET /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + "\nX-HTTP-Method-Override: POST\nX-Method-Override: POST",
		"GET /ui/api/v1/entities/note?_method=POST HTTP/1.1\n" + host + cookie,
		"OPTIONS /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + origin,
		"post /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + origin + "\nContent-Type: application/json",
		"POST /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + origin + "\nContent-Type: text/plain",
		"POST /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + origin + "\nContent-Type: application/x-www-form-urlencoded",
		"POST /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + "\nContent-Type: text/plain",
		"PUT /ui/api/v1/entities/note HTTP/1.1\n" + host + cookie + origin,
		"POST /ui/api/v1/entities/note HTTP/1.0\n" + host + cookie + origin + "\nContent-Type: text/plain",
	} {
		r := a.raw(req, body)
		if r.status/100 == 2 && !strings.HasPrefix(req, "GET") && !strings.HasPrefix(req, "HEAD") {
			t.Errorf("%q: %s", strings.SplitN(req, "\n", 2)[0], r)
		}
	}
	if a.noteExists("m1") {
		t.Error("a write without the CSRF token wrote")
	}
	// A GET of /ui/logout (an <img> of a foreign page) does not sign out.
	if r := a.raw("GET /ui/logout HTTP/1.1\n"+host+cookie, ""); r.status/100 == 2 {
		t.Errorf("GET /ui/logout: %s", r)
	}
	if !a.alive(sess) {
		t.Error("GET /ui/logout ended the session")
	}
	// A logout without the CSRF token does not sign out either.
	if r := a.raw("POST /ui/logout HTTP/1.1\n"+host+cookie+origin+"\nContent-Type: text/plain", "x"); r.status != http.StatusForbidden {
		t.Errorf("POST /ui/logout without CSRF: %s", r)
	}
	if !a.alive(sess) {
		t.Error("a logout without the CSRF token ended the session")
	}
}

func readClose(t *testing.T, c *websocket.Conn, within time.Duration) *websocket.CloseError {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce
		}
		t.Fatalf("the stream did not close within %v: %v", within, err)
	}
}

// An open event stream ends with its session: pushed out by 32 newer
// sign-ins; and after a logout the cookie opens no stream. Foreign
// origins get no handshake.
func TestUIAttackEventStream(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	sess := a.signIn()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	hdr := http.Header{"Origin": {a.env.URL}, "Cookie": {localapi.UICookieName + "=" + sess}}
	_, port, _ := net.SplitHostPort(a.env.Addr)
	for _, o := range []string{"null", "http://127.0.0.1:1", "http://localhost:" + port, a.env.URL + "/", "https://" + a.env.Addr} {
		h := hdr.Clone()
		h.Set("Origin", o)
		c, res, err := d.Dial(a.wsURL("/ui/api/v1/events?since=0"), h)
		if err == nil {
			c.Close()
			t.Errorf("Origin %q: handshake accepted", o)
		} else if res == nil || res.StatusCode != http.StatusForbidden {
			t.Errorf("Origin %q: %v", o, err)
		}
	}
	c, _, err := d.Dial(a.wsURL("/ui/api/v1/events?since=0"), hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range localapi.MaxUISessions {
		a.clock.Advance(time.Second) // later expiries: this one is the first to go
		a.signIn()
	}
	if ce := readClose(t, c, 30*time.Second); ce.Code != localapi.CloseRevoked || !strings.HasPrefix(ce.Text, "session_ended") {
		t.Errorf("pushed out: close %d %q, want %d session_ended", ce.Code, ce.Text, localapi.CloseRevoked)
	}

	// Logout: the open stream closes; the same cookie opens no new one.
	sess = a.signIn()
	hdr.Set("Cookie", localapi.UICookieName+"="+sess)
	c2, _, err := d.Dial(a.wsURL("/ui/api/v1/events?since=0"), hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if r := a.do("POST", "/ui/logout", a.page(sess, a.csrf(sess)), ""); r.status != http.StatusNoContent {
		t.Fatal(r)
	}
	if ce := readClose(t, c2, 30*time.Second); ce.Code != localapi.CloseRevoked {
		t.Errorf("after logout: close %d", ce.Code)
	}
	if c3, res, err := d.Dial(a.wsURL("/ui/api/v1/events?since=0"), hdr); err == nil {
		c3.Close()
		t.Error("a signed-out cookie opened a stream")
	} else if res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("signed-out cookie: %v", err)
	}
	// A token as ?token= or as a subprotocol does not stand for the cookie.
	h := http.Header{"Origin": {a.env.URL}, "Sec-WebSocket-Protocol": {"syncd.v1, syncd.token." + localapitest.Token}}
	if c4, res, err := d.Dial(a.wsURL("/ui/api/v1/events?since=0&token="+localapitest.Token), h); err == nil {
		c4.Close()
		t.Error("the token opened a /ui/ stream")
	} else if res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("token, no cookie: %v", err)
	}
}

// Nothing the page or its API answers, nothing the daemon logs and no
// event carries the admin token; the log carries no code and no session
// id either; GET /v1/apps shows no app token.
func TestUIAttackNoSecretLeaks(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	code := a.link()
	sess := a.redeem(code)
	if sess == "" {
		t.Fatal("sign-in failed")
	}
	csrf := a.csrf(sess)
	c, _, err := (&websocket.Dialer{HandshakeTimeout: 10 * time.Second}).Dial(a.wsURL("/ui/api/v1/events?since=0"), http.Header{"Origin": {a.env.URL}, "Cookie": {localapi.UICookieName + "=" + sess}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	added := a.do("POST", "/ui/api/v1/apps", a.page(sess, csrf), `{"name":"leaky","types":["note"]}`)
	if added.status != http.StatusCreated {
		t.Fatal(added)
	}
	var app struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal([]byte(added.body), &app)
	a.do("POST", "/ui/api/v1/entities/note", a.page(sess, csrf), `{"id":"last","data":{"title":"t"}}`)
	for _, p := range []string{"/ui/", "/ui/session", "/ui/api/v1/status", "/ui/api/v1/apps", "/ui/api/v1/openapi.json", "/ui/api/v1/nothing", "/ui/api/v1/status/history", "/ui/nothing"} {
		a.do("GET", p, a.page(sess, ""), "")
	}
	a.do("PATCH", "/ui/api/v1/entities/note/last", a.page(sess, csrf), `{bad json`)
	a.do("PUT", "/ui/api/v1/session", a.page(sess, csrf), `{"accountId":""}`)
	a.do("POST", "/ui/api/v1/entities/note", a.page(sess, "wrong"), `{}`)
	a.do("GET", "/ui/login?code="+code, nil, "")
	var events strings.Builder
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, m, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for the event of note last: %v", err)
		}
		events.Write(m)
		if bytes.Contains(m, []byte(`"last"`)) {
			break
		}
	}
	if app.Token != "" && strings.Contains(a.do("GET", "/ui/api/v1/apps", a.page(sess, ""), "").body, app.Token) {
		t.Error("GET /ui/api/v1/apps shows the app's token")
	}
	a.seenMu.Lock()
	seen := a.seen.String()
	a.seenMu.Unlock()
	logs := a.log.String()
	for where, text := range map[string]string{"the answers": seen, "the log": logs, "the events": events.String()} {
		if strings.Contains(text, localapitest.Token) {
			t.Errorf("%s carry the admin token", where)
		}
	}
	for what, secret := range map[string]string{"code": code, "session id": sess, "CSRF token": csrf, "app token": app.Token} {
		if secret != "" && strings.Contains(logs, secret) {
			t.Errorf("the log carries the %s", what)
		}
		if what != "app token" && strings.Contains(events.String(), secret) {
			t.Errorf("the events carry the %s", what)
		}
	}
}

// ui: off closes everything: the page, its API, its event stream (a
// WebSocket handshake), the link route, with or without the token.
func TestUIAttackUIOff(t *testing.T) {
	a := startAtk(t, localapitest.Options{Config: localapi.Config{UIOff: true}})
	if r := a.do("POST", "/v1/ui/links", admin(), ""); r.status != http.StatusNotFound {
		t.Errorf("POST /v1/ui/links: %s", r)
	}
	for _, p := range []string{"/ui", "/ui/", "/ui/login?code=x", "/ui/session", "/ui/assets/app.js", "/ui/api/v1/status", "/ui/api/v1/apps", "/ui/api/v1/ui/links", "/ui/api/v1/events"} {
		for _, h := range []http.Header{nil, admin(), {"Cookie": {localapi.UICookieName + "=x"}, "Origin": {a.env.URL}}} {
			if r := a.do("GET", p, h, ""); r.status != http.StatusNotFound {
				t.Errorf("GET %s (%v): %s", p, h, r)
			}
		}
	}
	h := http.Header{"Origin": {a.env.URL}, "Authorization": {"Bearer " + localapitest.Token}}
	c, res, err := (&websocket.Dialer{HandshakeTimeout: 10 * time.Second}).Dial(a.wsURL("/ui/api/v1/events?since=0"), h)
	if err == nil {
		c.Close()
		t.Error("ui off: /ui/api/v1/events accepted a WebSocket")
	} else if res == nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("ui off: events handshake: %v", err)
	}
	if r := a.do("POST", "/ui/api/v1/ui/links", h, ""); r.status != http.StatusNotFound {
		t.Errorf("ui off: POST /ui/api/v1/ui/links: %s", r)
	}
	// The API itself still works.
	if r := a.do("GET", "/v1/status", admin(), ""); r.status != http.StatusOK {
		t.Errorf("ui off: GET /v1/status: %s", r)
	}
}

// GET /v1/status/history through the page: no query parameter is
// taken, and the samples are bounded (an hour at 10 s).
func TestUIAttackHistoryBounds(t *testing.T) {
	a := startAtk(t, localapitest.Options{})
	sess := a.signIn()
	for _, q := range []string{"?since=-1", "?limit=999999999", "?limit=-1", "?since=0&limit=0", "?x", "?since=" + strings.Repeat("9", 5000)} {
		if r := a.do("GET", "/ui/api/v1/status/history"+q, a.page(sess, ""), ""); r.status != http.StatusBadRequest {
			t.Errorf("history%s: %s", q[:min(len(q), 30)], r)
		}
	}
	for range daemon.DefaultHistorySamples + 50 {
		if _, err := a.env.History.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	r := a.do("GET", "/ui/api/v1/status/history", a.page(sess, ""), "")
	var h struct {
		Samples []json.RawMessage `json:"samples"`
	}
	if err := json.Unmarshal([]byte(r.body), &h); err != nil || r.status != http.StatusOK {
		t.Fatalf("history: %s", r)
	}
	if len(h.Samples) > daemon.DefaultHistorySamples {
		t.Errorf("history keeps %d samples, want at most %d", len(h.Samples), daemon.DefaultHistorySamples)
	}
}

// A flood of wrong codes: each answer closes its connection (no slot
// of the unauthenticated-connection gate is held), the codes and the
// API go on working meanwhile, and a wrong code on a kept-alive
// connection ends it.
func TestUIAttackLoginFlood(t *testing.T) {
	a := startAtk(t, localapitest.Options{Config: localapi.Config{MaxUnauthenticatedConns: 16}})
	// A keep-alive connection gets Connection: close on a wrong code and
	// is closed by the server.
	c, err := net.DialTimeout("tcp", a.env.Addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET /ui/login?code=wrong HTTP/1.1\r\nHost: %s\r\n\r\n", a.env.Addr)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !res.Close {
		t.Errorf("wrong code on a kept-alive connection: %d, close %v", res.StatusCode, res.Close)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the server kept the connection of a wrong code open")
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent, other := 0, 0
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for i := 0; ctx.Err() == nil; i++ {
				r, err := http.NewRequestWithContext(ctx, "GET", a.env.URL+"/ui/login?code=wrong"+fmt.Sprint(i), nil)
				if err != nil {
					return
				}
				res, err := cl.Do(r)
				if err != nil {
					continue // the gate closed a connection past its bound
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				mu.Lock()
				sent++
				if res.StatusCode != http.StatusForbidden {
					other++
				}
				mu.Unlock()
			}
		}()
	}
	// Under the flood: a sign-in, a read of the page and an admin
	// request, each within a deadline.
	deadline := time.Now().Add(30 * time.Second)
	for i := range 20 {
		start := time.Now()
		sess := a.signIn()
		if !a.alive(sess) {
			t.Fatalf("sign-in %d under the flood: the session does not work", i)
		}
		if r := a.do("GET", "/v1/status", admin(), ""); r.status != http.StatusOK {
			t.Fatalf("admin under the flood: %s", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("sign-in %d under the flood passed the deadline (last took %v)", i, time.Since(start))
		}
	}
	cancel()
	wg.Wait()
	if other > 0 {
		t.Errorf("%d of %d wrong codes were not answered 403", other, sent)
	}
	t.Logf("%d wrong codes during 20 sign-ins", sent)
	// The gate holds nothing after the flood: 16 idle unauthenticated
	// connections fit.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 15 {
		c, err := net.DialTimeout("tcp", a.env.Addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if r := a.do("GET", "/ui/login?code="+a.link(), nil, ""); r.status != http.StatusSeeOther {
		t.Errorf("a sign-in beside 15 idle connections: %s", r)
	}
}

// --- In a browser ---

// atkBrowser starts headless Chromium (no listener: the foreign page's
// refusals are what this test expects).
func atkBrowser(t *testing.T) *page {
	t.Helper()
	bin, ok := chromium()
	if !ok {
		noChromium(t)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		chromedp.Cancel(cctx)
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1024, 700)); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return &page{t: t, ctx: ctx}
}

// awaitOn evaluates expr on the page and waits for its promise.
func awaitOn[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// foreignPage is what a page on another loopback port tries against a
// signed-in status page: it reports what it could see.
const foreignPage = `<!doctype html><meta charset="utf-8"><title>not syncd</title>
<body>
<iframe name="sink" style="display:none"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="TARGET/ui/api/v1/apps"><input name='{"name":"evilform","types":["note"],"x":"' value='"}'></form>
<script>
const T = "TARGET";
const out = {};
const step = (name, p) => p.then(v => { out[name] = v; }, e => { out[name] = "error: " + e; });
function load(tag, src) {
  return new Promise(res => {
    const el = document.createElement(tag);
    el.onload = () => res("loaded");
    el.onerror = () => res("error");
    el.src = src;
    document.body.appendChild(el);
  });
}
(async () => {
  await step("fetchStatus", fetch(T + "/ui/api/v1/status", {credentials: "include"}).then(r => r.status + " " + r.text()));
  await step("fetchSession", fetch(T + "/ui/session", {credentials: "include"}).then(async r => r.status + " " + await r.text()));
  await step("noCorsRead", fetch(T + "/ui/session", {credentials: "include", mode: "no-cors"}).then(r => r.type + " " + r.status));
  await step("noCorsPost", fetch(T + "/ui/api/v1/entities/note", {method: "POST", mode: "no-cors", credentials: "include",
    headers: {"Content-Type": "text/plain"}, body: JSON.stringify({id: "evil-fetch", data: {title: "x"}})}).then(r => r.type));
  await step("keepalivePost", fetch(T + "/ui/api/v1/entities/note", {method: "POST", mode: "no-cors", credentials: "include", keepalive: true,
    body: JSON.stringify({id: "evil-beacon", data: {title: "x"}})}).then(r => r.type));
  await step("img", load("img", T + "/ui/assets/icon.svg"));
  await step("imgStatus", load("img", T + "/ui/api/v1/status"));
  await step("script", load("script", T + "/ui/api/v1/apps"));
  await step("ws", new Promise(res => {
    const ws = new WebSocket(T.replace("http", "ws") + "/ui/api/v1/events?since=0");
    ws.onmessage = m => res("message: " + m.data);
    ws.onopen = () => res("open");
    ws.onerror = () => res("error");
  }));
  await new Promise(res => { document.querySelector("iframe").onload = res; document.getElementById("f").submit(); });
  out.formDone = true;
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
})();
</script>`

// foreignStack is a daemon, a foreign server on another port of
// 127.0.0.1, and Chromium signed in to the daemon's page.
func foreignStack(t *testing.T) (a *atk, foreign *httptest.Server, reports chan string, p *page) {
	t.Helper()
	a = startAtk(t, localapitest.Options{})
	reports = make(chan string, 1)
	foreign = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, strings.ReplaceAll(foreignPage, "TARGET", a.env.URL))
		case "/report":
			b, _ := io.ReadAll(r.Body)
			select {
			case reports <- string(b):
			default:
			}
		case "/overwrite":
			// The same name, host and path as the page's own cookie: it
			// replaces it (HttpOnly stops only document.cookie).
			http.SetCookie(w, &http.Cookie{Name: localapi.UICookieName, Value: "overwritten", Path: "/ui/"})
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<!doctype html><title>overwritten</title>overwritten")
		case "/toss":
			// Cookies do not keep ports apart: these apply to the
			// daemon's host too, with paths longer than /ui/.
			for i, p := range []string{"/ui/api/v1/status", "/ui/api/v1/", "/ui/api/v1", "/ui/api/", "/ui/api", "/ui/api/v1/events"} {
				http.SetCookie(w, &http.Cookie{Name: localapi.UICookieName, Value: fmt.Sprintf("tossed%d", i), Path: p})
			}
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<!doctype html><title>tossed</title>tossed")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(foreign.Close)
	if !strings.HasPrefix(foreign.URL, "http://127.0.0.1:") {
		t.Fatalf("the foreign page is at %s, not another port of 127.0.0.1", foreign.URL)
	}

	p = atkBrowser(t)
	p.do(chromedp.Navigate(a.env.URL + "/ui/login?code=" + a.link()))
	p.wait("the signed-in page", `location.pathname === "/ui/" && document.readyState === "complete"`)
	if st := awaitOn[float64](p, `fetch("/ui/api/v1/status").then(r => r.status)`); st != 200 {
		t.Fatalf("the signed-in page reads its status: %v", st)
	}
	if ref := evalOn[string](p, `document.referrer + "|" + location.href`); strings.Contains(ref, "code=") {
		t.Errorf("the page's URL or referrer keeps the code: %s", ref)
	}

	return a, foreign, reports, p
}

// A page on another loopback port of the same host (same site, so the
// browser sends it the SameSite=Strict cookie) tries to read and write
// through a signed-in browser: a credentialed fetch, a no-cors POST, a
// keepalive POST (as a beacon sends), a text/plain form POST, an
// <img>, a <script src> of a JSON route, a WebSocket. Nothing is read,
// nothing is written (the <img> of the page's icon loads: the cookie is
// sent, and the Origin and CSRF checks are what holds). The sign-in
// code stays out of the page's URL and referrer.
func TestUIAttackBrowserForeignPage(t *testing.T) {
	a, foreign, reports, p := foreignStack(t)
	p.do(chromedp.Navigate(foreign.URL + "/"))
	var report string
	select {
	case report = <-reports:
	case <-time.After(90 * time.Second):
		t.Fatalf("the foreign page did not report; it shows: %s", p.bodyText())
	}
	t.Logf("the foreign page saw: %s", report)
	var out map[string]any
	if err := json.Unmarshal([]byte(report), &out); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"fetchStatus", "fetchSession"} {
		if s, _ := out[k].(string); !strings.HasPrefix(s, "error") {
			t.Errorf("%s: the foreign page read %q", k, s)
		}
	}
	if strings.Contains(report, "acct-atk") || strings.Contains(report, "csrf") {
		t.Error("the foreign page read the page's data")
	}
	if s, _ := out["script"].(string); s != "error" {
		t.Errorf("<script src> of a JSON route: %s", s)
	}
	if s, _ := out["ws"].(string); s != "error" {
		t.Errorf("the foreign page's WebSocket: %s", s)
	}
	// The login oracle: an <img> of the page's icon loads only when
	// signed in (the answer is 401 otherwise). Reported, not a break: it
	// tells a same-site page only whether this browser is signed in.
	t.Logf("foreign <img> of /ui/assets/icon.svg: %v (a signed-in oracle for same-site pages)", out["img"])
	// Every request was answered before the report (each awaited).
	for _, id := range []string{"evil-fetch", "evil-beacon"} {
		if a.noteExists(id) {
			t.Errorf("the foreign page wrote note %s", id)
		}
	}
	if strings.Contains(a.appNames(), "evilform") {
		t.Error("the foreign form registered an app")
	}

}

// Was a break, fixed: a server on another port of 127.0.0.1 that the signed-in
// browser visits signs the page out: six syncd_ui cookies with paths
// longer than /ui/ hid the real one from /ui/api (only the first four
// were looked at; now all are), and one with Path=/ui/ replaces it (a
// limit docs/ui.md states).
func TestUIAttackBrowserCookieTossing(t *testing.T) {
	a, foreign, _, p := foreignStack(t)
	// Cookie tossing from the foreign port, then back to the page.
	p.do(chromedp.Navigate(foreign.URL + "/toss"))
	p.wait("the tossing page", `document.title === "tossed"`)
	p.do(chromedp.Navigate(a.env.URL + "/ui/"))
	p.wait("the page", `location.pathname === "/ui/" && document.readyState === "complete"`)
	if st := awaitOn[float64](p, `fetch("/ui/session").then(r => r.status)`); st != 200 {
		t.Errorf("after the tossing, GET /ui/session: %v", st)
	}
	if st := awaitOn[float64](p, `fetch("/ui/api/v1/status").then(r => r.status)`); st != 200 {
		t.Errorf("after a page on another port set 6 syncd_ui cookies with longer paths, the signed-in page's GET /ui/api/v1/status answers %v, want 200: the page is signed out of its API (docs/ui.md says tossed cookies do not do that)", st)
	}
	ws := awaitOn[string](p, `new Promise(res => { const ws = new WebSocket("ws://" + location.host + "/ui/api/v1/events"); ws.onopen = () => res("open"); ws.onerror = () => res("error"); })`)
	if ws != "open" {
		t.Errorf("after the tossing, the page's event stream: %s, want open", ws)
	}

	// A server on another port replaces the cookie outright: the page
	// is signed out, as docs/ui.md says (no check of the daemon can tell
	// that cookie from the page's own).
	p.do(chromedp.Navigate(foreign.URL + "/overwrite"))
	p.wait("the overwriting page", `document.title === "overwritten"`)
	p.do(chromedp.Navigate(a.env.URL + "/ui/"))
	p.wait("the page", `location.pathname === "/ui/" && document.readyState === "complete"`)
	if st := awaitOn[float64](p, `fetch("/ui/session").then(r => r.status)`); st != 401 {
		t.Errorf("after a page on another port set syncd_ui=overwritten; Path=/ui/, GET /ui/session answers %v; docs/ui.md says it signs the page out (401): update them", st)
	}
}
