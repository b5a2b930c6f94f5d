package localapi

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/clocktest"
	"github.com/syncd/syncd/queue"
)

// uiEnv is an env with the status page and an injected clock.
type uiEnv struct {
	*env
	clock *clocktest.Clock
}

func setupUI(t *testing.T, o envOptions) *uiEnv {
	t.Helper()
	clock := clocktest.New()
	o.cfg.Now = clock.Now
	if o.account == "" {
		o.account = "acct-ui"
	}
	e := setup(t, o)
	return &uiEnv{env: e, clock: clock}
}

// origin is the page's own origin.
func (e *uiEnv) origin() string { return e.url }

// uiReq is a request of the page: no bearer token, the cookie if
// session is not empty, never following redirects.
type uiReq struct {
	method, path, body string
	session            string            // the cookie's value
	header             map[string]string // set after the defaults
}

type uiResp struct {
	status int
	header http.Header
	raw    string
}

func (r uiResp) code() string {
	var b errorBody
	_ = json.Unmarshal([]byte(r.raw), &b)
	return b.Error.Code
}

func (e *uiEnv) ui(rq uiReq) uiResp {
	e.t.Helper()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	hr, err := http.NewRequest(cmpOr(rq.method, http.MethodGet), e.url+rq.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if rq.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	if rq.session != "" {
		hr.AddCookie(&http.Cookie{Name: UICookieName, Value: rq.session})
	}
	for k, v := range rq.header {
		hr.Header.Set(k, v)
	}
	c := &http.Client{Transport: e.client.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, h := range []string{"X-Frame-Options", "X-Content-Type-Options", "Cache-Control"} {
		if res.Header.Get(h) == "" {
			e.t.Errorf("%s %s: no %s header", hr.Method, rq.path, h)
		}
	}
	return uiResp{status: res.StatusCode, header: res.Header, raw: string(raw)}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// link makes a sign-in link with the admin token and returns its code.
func (e *uiEnv) link() string {
	e.t.Helper()
	r := e.must(http.StatusCreated, req{method: "POST", path: "/v1/ui/links"})
	u, err := url.Parse(r.str("url"))
	if err != nil {
		e.t.Fatal(err)
	}
	if base, _ := url.Parse(e.url); u.Scheme != "http" || u.Host != base.Host || u.Path != "/ui/login" {
		e.t.Fatalf("link %q, want http://%s/ui/login?code=...", r.str("url"), base.Host)
	}
	exp, err := time.Parse(time.RFC3339, r.str("expires_at"))
	if err != nil || !exp.Equal(e.clock.Now().Add(UILinkLifetime)) {
		e.t.Fatalf("expires_at %q (%v), want %v", r.str("expires_at"), err, e.clock.Now().Add(UILinkLifetime))
	}
	code := u.Query().Get("code")
	if len(code) < 22 { // 128 bits in base64
		e.t.Fatalf("code %q is too short", code)
	}
	return code
}

// signIn opens a link and returns the session cookie's value.
func (e *uiEnv) signIn() string {
	e.t.Helper()
	r := e.ui(uiReq{path: "/ui/login?code=" + e.link()})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
		e.t.Fatalf("login: %d, Location %q, want 303 to /ui/: %s", r.status, r.header.Get("Location"), r.raw)
	}
	c := sessionCookie(e.t, r)
	if c == nil {
		e.t.Fatal("login set no session cookie")
	}
	return c.Value
}

// csrf reads the session's CSRF token.
func (e *uiEnv) csrf(session string) string {
	e.t.Helper()
	r := e.ui(uiReq{path: "/ui/session", session: session})
	if r.status != http.StatusOK {
		e.t.Fatalf("GET /ui/session: %d %s", r.status, r.raw)
	}
	var s struct {
		CSRF string `json:"csrf_token"`
	}
	if err := json.Unmarshal([]byte(r.raw), &s); err != nil || s.CSRF == "" {
		e.t.Fatalf("GET /ui/session: %s (%v)", r.raw, err)
	}
	return s.CSRF
}

// write is a write of the page: its Origin and CSRF token.
func (e *uiEnv) write(method, path, body, session, csrf string) uiResp {
	e.t.Helper()
	return e.ui(uiReq{method: method, path: path, body: body, session: session, header: map[string]string{"Origin": e.origin(), HeaderCSRFToken: csrf}})
}

func sessionCookie(t testing.TB, r uiResp) *http.Cookie {
	t.Helper()
	for _, line := range r.header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			t.Fatalf("Set-Cookie %q: %v", line, err)
		}
		if c.Name == UICookieName {
			return c
		}
	}
	return nil
}

// The whole sign-in: a link, its code for a cookie, the page, its
// session, reads and a write through /ui/api, and the sign-out.
func TestUISignInFlow(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	code := e.link()
	r := e.ui(uiReq{path: "/ui/login?code=" + code})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
		t.Fatalf("login: %d %q", r.status, r.header.Get("Location"))
	}
	c := sessionCookie(t, r)
	if c == nil || len(c.Value) < 22 {
		t.Fatalf("cookie %+v", c)
	}
	if c.Path != "/ui/" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge != 12*3600 || c.Secure {
		t.Errorf("cookie %q: want Path=/ui/; HttpOnly; SameSite=Strict; Max-Age=43200", r.header.Get("Set-Cookie"))
	}
	sess := c.Value

	page := e.ui(uiReq{path: "/ui/", session: sess})
	if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /ui/: %d %s", page.status, page.header.Get("Content-Type"))
	}
	if got := page.header.Get("Content-Security-Policy"); got != uiCSP {
		t.Errorf("CSP %q", got)
	}
	if page.raw != string(uiAssets["index.html"].body) {
		t.Error("GET /ui/ is not index.html")
	}
	for name, a := range uiAssets {
		r := e.ui(uiReq{path: "/ui/assets/" + name, session: sess})
		if r.status != http.StatusOK || r.raw != string(a.body) || r.header.Get("Content-Security-Policy") != uiCSP {
			t.Errorf("GET /ui/assets/%s: %d, CSP %q", name, r.status, r.header.Get("Content-Security-Policy"))
		}
	}
	if r := e.ui(uiReq{path: "/ui/assets/no-such.js", session: sess}); r.status != http.StatusNotFound || r.code() != CodeNotFound {
		t.Errorf("missing asset: %d %s", r.status, r.raw)
	}

	sr := e.ui(uiReq{path: "/ui/session", session: sess})
	var info struct {
		CSRF      string    `json:"csrf_token"`
		ExpiresAt time.Time `json:"expires_at"`
		EventsURL string    `json:"events_url"`
	}
	if err := json.Unmarshal([]byte(sr.raw), &info); err != nil || sr.status != http.StatusOK {
		t.Fatalf("GET /ui/session: %d %s", sr.status, sr.raw)
	}
	if len(info.CSRF) < 22 || !info.ExpiresAt.Equal(e.clock.Now().Add(UISessionLifetime)) || info.EventsURL != "/ui/api/v1/events" {
		t.Errorf("session %s", sr.raw)
	}

	st := e.ui(uiReq{path: "/ui/api/v1/status", session: sess})
	if st.status != http.StatusOK || !strings.Contains(st.raw, `"accountId":"acct-ui"`) {
		t.Fatalf("GET /ui/api/v1/status: %d %s", st.status, st.raw)
	}
	w := e.write("POST", "/ui/api/v1/entities/note", `{"id":"n1","data":{"title":"from the page"}}`, sess, info.CSRF)
	if w.status != http.StatusCreated {
		t.Fatalf("create through the page: %d %s", w.status, w.raw)
	}
	// The admin's rights: the app registry is admin-only.
	if r := e.ui(uiReq{path: "/ui/api/v1/apps", session: sess}); r.status != http.StatusOK {
		t.Errorf("GET /ui/api/v1/apps: %d %s", r.status, r.raw)
	}
	if r := e.ui(uiReq{path: "/ui/api/v1/entities/note/n1", session: sess}); r.status != http.StatusOK || !strings.Contains(r.raw, "from the page") {
		t.Errorf("read back: %d %s", r.status, r.raw)
	}
	// API errors keep the API's shape and path.
	if r := e.ui(uiReq{path: "/ui/api/v1/nothing", session: sess}); r.status != http.StatusNotFound || r.code() != CodeNotFound {
		t.Errorf("unknown API route: %d %s", r.status, r.raw)
	}

	out := e.write("POST", "/ui/logout", "", sess, info.CSRF)
	if out.status != http.StatusNoContent {
		t.Fatalf("logout: %d %s", out.status, out.raw)
	}
	if c := sessionCookie(t, out); c == nil || c.MaxAge >= 0 {
		t.Errorf("logout does not clear the cookie: %q", out.header.Get("Set-Cookie"))
	}
	if r := e.ui(uiReq{path: "/ui/api/v1/status", session: sess}); r.status != http.StatusUnauthorized || r.code() != CodeSessionRequired {
		t.Errorf("after logout: %d %s", r.status, r.raw)
	}
}

// A cookie of the same name set by a server on another port (with a
// longer path, so sent first) does not sign the page out.
func TestUICookieTossing(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	sess := e.signIn()
	r := e.ui(uiReq{path: "/ui/api/v1/status", header: map[string]string{"Cookie": UICookieName + "=tossed; " + UICookieName + "=" + sess}})
	if r.status != http.StatusOK {
		t.Errorf("a tossed cookie first: %d %s", r.status, r.raw)
	}
	if r := e.ui(uiReq{path: "/ui/api/v1/status", header: map[string]string{"Cookie": UICookieName + "=a; " + UICookieName + "=b"}}); r.status != http.StatusUnauthorized {
		t.Errorf("two forged cookies: %d", r.status)
	}
	// However many come first (a foreign port may set one per path),
	// the live one is found.
	tossed := strings.Repeat(UICookieName+"=x; ", 40)
	if r := e.ui(uiReq{path: "/ui/api/v1/status", header: map[string]string{"Cookie": tossed + UICookieName + "=" + sess}}); r.status != http.StatusOK {
		t.Errorf("the live session after 40 tossed cookies: %d", r.status)
	}
}

// A foreign page's subresource requests (Fetch Metadata same-site from
// another port, or cross-site) get nothing, not even the icon that would
// tell it the browser is signed in; the user's own navigation, and the
// page's same-origin requests, do.
func TestUIFetchMetadata(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	sess := e.signIn()
	for _, site := range []string{"same-site", "cross-site"} {
		for _, p := range []string{"/ui/assets/icon.svg", "/ui/api/v1/status", "/ui/session", "/ui/"} {
			r := e.ui(uiReq{path: p, session: sess, header: map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}})
			if r.status != http.StatusForbidden || r.code() != CodeForbiddenOrigin {
				t.Errorf("%s %s: %d %s, want 403 forbidden_origin", site, p, r.status, r.raw)
			}
		}
		r := e.ui(uiReq{path: "/ui/", session: sess, header: map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}})
		if r.status != http.StatusOK {
			t.Errorf("the user opening /ui/ from a %s link: %d", site, r.status)
		}
	}
	for _, site := range []string{"same-origin", "none", ""} {
		r := e.ui(uiReq{path: "/ui/api/v1/status", session: sess, header: map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "cors"}})
		if r.status != http.StatusOK {
			t.Errorf("Sec-Fetch-Site %q: %d %s", site, r.status, r.raw)
		}
	}
}

// /ui becomes /ui/.
func TestUIRedirectsBarePrefix(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	r := e.ui(uiReq{path: "/ui"})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d %q", r.status, r.header.Get("Location"))
	}
}

// Without a session nothing under /ui/ shows data: the page is a
// static sign-in-needed page, every other route 401 session_required.
// A forged cookie, a bearer token (header or ?token=), an expired
// session: the same.
func TestUIWithoutSession(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	e.must(http.StatusCreated, req{method: "POST", path: "/v1/entities/note", body: `{"id":"secret-note","data":{"title":"secret title"}}`})
	live := e.signIn()
	csrf := e.csrf(live)

	paths := []string{"/ui/", "/ui/assets/index.html", "/ui/session", "/ui/api/v1/status", "/ui/api/v1/operations", "/ui/api/v1/entities/note", "/ui/api/v1/entities/note/secret-note", "/ui/api/v1/apps", "/ui/api/v1/status/history", "/ui/nothing"}
	cases := []struct {
		name    string
		session string
		header  map[string]string
		query   string
	}{
		{name: "no cookie"},
		{name: "forged cookie", session: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		{name: "the CSRF token as cookie", session: csrf},
		{name: "bearer token", header: map[string]string{"Authorization": "Bearer " + testToken}},
		{name: "token query", query: "?token=" + testToken},
		{name: "token subprotocol", header: map[string]string{"Sec-WebSocket-Protocol": wsProtocol + ", " + wsTokenProtocolPrefix + testToken}},
	}
	for _, tc := range cases {
		for _, p := range paths {
			r := e.ui(uiReq{path: p + tc.query, session: tc.session, header: tc.header})
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s: GET %s: %d, want 401: %s", tc.name, p, r.status, r.raw)
				continue
			}
			for _, secret := range []string{"secret-note", "secret title", "acct-ui"} {
				if strings.Contains(r.raw, secret) {
					t.Errorf("%s: GET %s shows %q", tc.name, p, secret)
				}
			}
			if p == "/ui/" {
				if !strings.Contains(r.raw, "syncd ui") || r.header.Get("Content-Security-Policy") != uiCSP {
					t.Errorf("%s: GET /ui/: not the sign-in page: %s", tc.name, r.raw)
				}
			} else if r.code() != CodeSessionRequired {
				t.Errorf("%s: GET %s: code %q, want session_required", tc.name, p, r.code())
			}
		}
	}
	// A write without a session is refused the same way, and writes
	// nothing.
	before := e.snapshot()
	r := e.ui(uiReq{method: "POST", path: "/ui/api/v1/entities/note", body: `{"data":{"title":"x"}}`, header: map[string]string{"Origin": e.origin(), HeaderCSRFToken: csrf, "Authorization": "Bearer " + testToken}})
	if r.status != http.StatusUnauthorized || r.code() != CodeSessionRequired {
		t.Errorf("write without a session: %d %s", r.status, r.raw)
	}
	if !before.equal(e.snapshot()) {
		t.Error("a refused write changed the queue")
	}

	// The live session still works, until it expires.
	if r := e.ui(uiReq{path: "/ui/api/v1/status", session: live}); r.status != http.StatusOK {
		t.Fatalf("live session: %d %s", r.status, r.raw)
	}
	e.clock.Advance(UISessionLifetime - time.Second)
	if r := e.ui(uiReq{path: "/ui/api/v1/status", session: live}); r.status != http.StatusOK {
		t.Fatalf("a second before expiry: %d %s", r.status, r.raw)
	}
	e.clock.Advance(time.Second)
	for _, p := range paths {
		if r := e.ui(uiReq{path: p, session: live}); r.status != http.StatusUnauthorized {
			t.Errorf("expired session: GET %s: %d", p, r.status)
		}
	}
}

// A code works once, for UILinkLifetime; a replayed, expired, unknown
// or missing code gets 403 and the page saying to run syncd ui again,
// and no cookie.
func TestUILoginRefusals(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	refused := func(what, query string) {
		t.Helper()
		r := e.ui(uiReq{path: "/ui/login" + query})
		if r.status != http.StatusForbidden || !strings.Contains(r.raw, "syncd ui") || sessionCookie(t, r) != nil {
			t.Errorf("%s: %d, cookie %q: %s", what, r.status, r.header.Get("Set-Cookie"), r.raw)
		}
		if got := r.header.Get("Content-Security-Policy"); got != uiCSP {
			t.Errorf("%s: CSP %q", what, got)
		}
	}
	code := e.link()
	// A HEAD (a link checker's) does not use the code up; a POST is no
	// way in either.
	if r := e.ui(uiReq{method: "HEAD", path: "/ui/login?code=" + code}); r.status != http.StatusMethodNotAllowed || sessionCookie(t, r) != nil {
		t.Errorf("HEAD /ui/login: %d, want 405 and no cookie", r.status)
	}
	if r := e.ui(uiReq{method: "POST", path: "/ui/login?code=" + code}); r.status != http.StatusUnauthorized || sessionCookie(t, r) != nil {
		t.Errorf("POST /ui/login: %d, want 401 and no cookie", r.status)
	}
	if r := e.ui(uiReq{path: "/ui/login?code=" + code}); r.status != http.StatusSeeOther {
		t.Fatalf("first use: %d", r.status)
	}
	refused("replayed code", "?code="+code)

	code = e.link()
	e.clock.Advance(UILinkLifetime)
	refused("expired code", "?code="+code)

	code = e.link()
	e.clock.Advance(UILinkLifetime - time.Second)
	if r := e.ui(uiReq{path: "/ui/login?code=" + code}); r.status != http.StatusSeeOther {
		t.Errorf("a second before expiry: %d", r.status)
	}
	refused("unknown code", "?code=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	refused("no code", "")
	refused("the admin token as code", "?code="+testToken)
	// An expired code is used up by the try: it does not come back.
	code = e.link()
	e.clock.Advance(time.Hour)
	refused("expired code", "?code="+code)
	e.clock.Advance(-time.Hour)
	refused("expired code, clock back", "?code="+code)
}

// Every write of the page needs its own Origin and the session's CSRF
// token; any request with a foreign Origin is refused, even with both.
// Nothing is written by a refused request.
func TestUIWriteRefusals(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	e.must(http.StatusCreated, req{method: "POST", path: "/v1/entities/note", body: `{"id":"n1","data":{"title":"t"}}`})
	sess := e.signIn()
	csrf := e.csrf(sess)
	other := e.signIn()
	otherCSRF := e.csrf(other)
	base, _ := url.Parse(e.url)
	otherPort := "http://" + base.Hostname() + ":1"
	if strings.HasSuffix(e.url, ":1") {
		otherPort = "http://" + base.Hostname() + ":2"
	}

	writes := []struct{ method, path, body string }{
		{"POST", "/ui/api/v1/entities/note", `{"data":{"title":"x"}}`},
		{"PATCH", "/ui/api/v1/entities/note/n1", `{"data":{"title":"y"}}`},
		{"DELETE", "/ui/api/v1/entities/note/n1", ""},
		{"POST", "/ui/api/v1/apps", `{"name":"evil","types":["note"]}`},
		{"PUT", "/ui/api/v1/session", `{"accountId":"evil","accessToken":"x"}`},
		{"POST", "/ui/logout", ""},
	}
	cases := []struct {
		name   string
		header map[string]string
		status int
		code   string
	}{
		{"another site", map[string]string{"Origin": "https://evil.example", HeaderCSRFToken: csrf}, 403, CodeForbiddenOrigin},
		{"another loopback port", map[string]string{"Origin": otherPort, HeaderCSRFToken: csrf}, 403, CodeForbiddenOrigin},
		{"localhost for 127.0.0.1", map[string]string{"Origin": "http://localhost:" + base.Port(), HeaderCSRFToken: csrf}, 403, CodeForbiddenOrigin},
		{"https on the same port", map[string]string{"Origin": "https://" + base.Host, HeaderCSRFToken: csrf}, 403, CodeForbiddenOrigin},
		{"null origin", map[string]string{"Origin": "null", HeaderCSRFToken: csrf}, 403, CodeForbiddenOrigin},
		{"no origin", map[string]string{HeaderCSRFToken: csrf}, 403, CodeForbiddenOrigin},
		{"no CSRF token", map[string]string{"Origin": e.origin()}, 403, CodeCSRFFailed},
		{"wrong CSRF token", map[string]string{"Origin": e.origin(), HeaderCSRFToken: csrf[:len(csrf)-1] + "x"}, 403, CodeCSRFFailed},
		{"another session's CSRF token", map[string]string{"Origin": e.origin(), HeaderCSRFToken: otherCSRF}, 403, CodeCSRFFailed},
		{"the session id as CSRF token", map[string]string{"Origin": e.origin(), HeaderCSRFToken: sess}, 403, CodeCSRFFailed},
		{"the admin token as CSRF token", map[string]string{"Origin": e.origin(), HeaderCSRFToken: testToken}, 403, CodeCSRFFailed},
	}
	before := e.snapshot()
	for _, tc := range cases {
		for _, w := range writes {
			r := e.ui(uiReq{method: w.method, path: w.path, body: w.body, session: sess, header: tc.header})
			if r.status != tc.status || r.code() != tc.code {
				t.Errorf("%s: %s %s: %d %s, want %d %s", tc.name, w.method, w.path, r.status, r.code(), tc.status, tc.code)
			}
		}
	}
	// A foreign Origin is refused on reads too (a page elsewhere
	// cannot read the answers anyway; it gets nothing to try).
	for _, o := range []string{"https://evil.example", otherPort} {
		r := e.ui(uiReq{path: "/ui/api/v1/status", session: sess, header: map[string]string{"Origin": o}})
		if r.status != http.StatusForbidden || r.code() != CodeForbiddenOrigin || strings.Contains(r.raw, "acct-ui") {
			t.Errorf("GET from %s: %d %s", o, r.status, r.raw)
		}
		if r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET from %s: CORS header", o)
		}
	}
	if !before.equal(e.snapshot()) {
		t.Error("a refused write changed the queue")
	}
	apps, _ := e.store.Apps()
	if len(apps) != 0 {
		t.Errorf("a refused write registered an app: %v", apps)
	}
	// Both sessions are still live, and the right headers work.
	if r := e.write("PATCH", "/ui/api/v1/entities/note/n1", `{"data":{"title":"ok"}}`, sess, csrf); r.status != http.StatusOK {
		t.Errorf("the page's own write: %d %s", r.status, r.raw)
	}
	if r := e.write("POST", "/ui/logout", "", other, otherCSRF); r.status != http.StatusNoContent {
		t.Errorf("logout: %d %s", r.status, r.raw)
	}
}

// /ui/ is served to loopback names only: not to a Host that
// AllowedHosts lets reach the API.
func TestUIHostLoopbackOnly(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{cfg: Config{AllowedHosts: []string{"syncd-box.lan"}}})
	sess := e.signIn()
	hr, _ := http.NewRequest("GET", e.url+"/ui/api/v1/status", nil)
	hr.Host = "syncd-box.lan"
	hr.AddCookie(&http.Cookie{Name: UICookieName, Value: sess})
	res, err := e.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("GET /ui/ with Host syncd-box.lan: %d, want 403", res.StatusCode)
	}
	// The API itself still takes it.
	e.must(http.StatusOK, req{method: "GET", path: "/v1/status", host: "syncd-box.lan"})
}

// The event stream through /ui/api: the session cookie and the page's
// own Origin; a foreign Origin or none is refused at the handshake.
func TestUIEventsWebSocket(t *testing.T) {
	t.Parallel()
	bus := daemon.NewBus(daemon.BusConfig{})
	t.Cleanup(bus.Close)
	e := setupUI(t, envOptions{cfg: Config{Bus: bus}, qcfg: queue.Config{OnCommit: bus.Publish}})
	if err := bus.SetSource(e.store); err != nil {
		t.Fatal(err)
	}
	sess := e.signIn()
	wsURL := "ws" + strings.TrimPrefix(e.url, "http") + "/ui/api/v1/events?since=0"
	dial := func(h http.Header) (*websocket.Conn, *http.Response, error) {
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
		return d.Dial(wsURL, h)
	}
	base, _ := url.Parse(e.url)
	for _, tc := range []struct {
		name   string
		header http.Header
		status int
	}{
		{"another site", http.Header{"Origin": {"https://evil.example"}, "Cookie": {UICookieName + "=" + sess}}, 403},
		{"another loopback port", http.Header{"Origin": {"http://" + base.Hostname() + ":1"}, "Cookie": {UICookieName + "=" + sess}}, 403},
		{"no origin", http.Header{"Cookie": {UICookieName + "=" + sess}}, 403},
		{"no cookie", http.Header{"Origin": {e.origin()}}, 401},
		{"bearer token, no cookie", http.Header{"Origin": {e.origin()}, "Authorization": {"Bearer " + testToken}}, 401},
	} {
		c, res, err := dial(tc.header)
		if err == nil {
			c.Close()
			t.Errorf("%s: handshake accepted", tc.name)
			continue
		}
		if res == nil || res.StatusCode != tc.status {
			t.Errorf("%s: %v, want %d", tc.name, err, tc.status)
		}
		if res != nil {
			res.Body.Close()
		}
	}
	c, _, err := dial(http.Header{"Origin": {e.origin()}, "Cookie": {UICookieName + "=" + sess}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e.must(http.StatusCreated, req{method: "POST", path: "/v1/entities/note", body: `{"id":"live","data":{"title":"t"}}`})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var ev struct {
			Type     string `json:"type"`
			EntityID string `json:"entityId"`
		}
		if err := c.ReadJSON(&ev); err != nil {
			t.Fatal(err)
		}
		if ev.EntityID == "live" {
			break
		}
	}
	// Signing out ends the page's streams: 4401, session_ended.
	if r := e.write("POST", "/ui/logout", "", sess, e.csrf(sess)); r.status != http.StatusNoContent {
		t.Fatalf("logout: %d %s", r.status, r.raw)
	}
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue // events sent before the close
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != CloseRevoked || !strings.HasPrefix(ce.Text, "session_ended") {
			t.Fatalf("after logout: %v, want close %d session_ended", err, CloseRevoked)
		}
		break
	}

	// A stream opened a millisecond before its session expires closes
	// when it does.
	sess2 := e.signIn()
	e.clock.Advance(UISessionLifetime - time.Millisecond)
	c2, _, err := dial(http.Header{"Origin": {e.origin()}, "Cookie": {UICookieName + "=" + sess2}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := c2.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != CloseRevoked {
			t.Fatalf("at expiry: %v, want close %d", err, CloseRevoked)
		}
		break
	}
}

// ui off: every /ui/ route and POST /v1/ui/links answer 404 not_found.
func TestUIOff(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{cfg: Config{UIOff: true}})
	r := e.do(req{method: "POST", path: "/v1/ui/links"})
	if r.status != http.StatusNotFound || r.code() != CodeNotFound {
		t.Errorf("POST /v1/ui/links: %d %s", r.status, r.raw)
	}
	for _, p := range []string{"/ui", "/ui/", "/ui/login?code=x", "/ui/session", "/ui/assets/index.html", "/ui/api/v1/status"} {
		r := e.ui(uiReq{path: p})
		if r.status != http.StatusNotFound || r.code() != CodeNotFound {
			t.Errorf("GET %s: %d %s", p, r.status, r.raw)
		}
	}
	if r := e.ui(uiReq{method: "POST", path: "/ui/logout", header: map[string]string{"Origin": e.origin()}}); r.status != http.StatusNotFound {
		t.Errorf("POST /ui/logout: %d", r.status)
	}
}

// MaxUILinks links may be outstanding; past it 429 too_many_links,
// until one is used or expires.
func TestUILinkLimit(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	codes := make([]string, MaxUILinks)
	for i := range codes {
		codes[i] = e.link()
	}
	r := e.do(req{method: "POST", path: "/v1/ui/links"})
	if r.status != http.StatusTooManyRequests || r.code() != CodeTooManyLinks {
		t.Fatalf("link %d: %d %s, want 429 too_many_links", MaxUILinks+1, r.status, r.raw)
	}
	// Using one frees its place.
	if r := e.ui(uiReq{path: "/ui/login?code=" + codes[0]}); r.status != http.StatusSeeOther {
		t.Fatalf("login: %d", r.status)
	}
	e.link()
	e.must(http.StatusTooManyRequests, req{method: "POST", path: "/v1/ui/links"})
	// Expiry frees them all.
	e.clock.Advance(UILinkLifetime)
	for range MaxUILinks {
		e.link()
	}
	// The route is the admin's: an app token cannot make a link, nor
	// can a session of the page (it is not under /ui/api either).
	tok := e.addApp("notes", []string{"note"}, false)
	if r := e.do(req{method: "POST", path: "/v1/ui/links", header: bearer(tok)}); r.status != http.StatusForbidden || r.code() != CodeAdminRequired {
		t.Errorf("app token: %d %s", r.status, r.raw)
	}
	if r := e.do(req{method: "POST", path: "/v1/ui/links", body: `{}`}); r.status != http.StatusBadRequest {
		t.Errorf("with a body: %d %s", r.status, r.raw)
	}
}

// MaxUISessions sessions are kept; a sign-in past it ends the one that
// expires first.
func TestUISessionLimit(t *testing.T) {
	t.Parallel()
	e := setupUI(t, envOptions{})
	sessions := make([]string, MaxUISessions)
	for i := range sessions {
		sessions[i] = e.signIn()
		e.clock.Advance(time.Second) // distinct expiries
	}
	newest := e.signIn()
	if r := e.ui(uiReq{path: "/ui/session", session: sessions[0]}); r.status != http.StatusUnauthorized {
		t.Errorf("the oldest session survived: %d", r.status)
	}
	for _, s := range append(sessions[1:], newest) {
		if r := e.ui(uiReq{path: "/ui/session", session: s}); r.status != http.StatusOK {
			t.Fatalf("a newer session ended: %d", r.status)
		}
	}
	e.srv.ui.mu.Lock()
	n := len(e.srv.ui.sessions)
	e.srv.ui.mu.Unlock()
	if n != MaxUISessions {
		t.Errorf("%d sessions kept, want %d", n, MaxUISessions)
	}
}

// The sign-in link names the loopback TCP listener Run serves, also
// when asked over the Unix socket; a wildcard listener is reached on
// loopback, another address has no link.
func TestUILinkAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen string
		want   string
		code   string
	}{
		{"127.0.0.1:7419", "127.0.0.1:7419", ""},
		{"[::1]:7419", "[::1]:7419", ""},
		{"0.0.0.0:7419", "127.0.0.1:7419", ""},
		{"[::]:7419", "[::1]:7419", ""},
		{"192.168.1.10:7419", "", CodeUIUnreachable},
	} {
		s := &Server{}
		a, err := net.ResolveTCPAddr("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		s.tcpAddr = a
		r, _ := http.NewRequest("POST", "http://ignored.example/v1/ui/links", nil)
		got, err := s.uiAddrFor(r)
		if tc.code != "" {
			if _, code := classify(err); code != tc.code {
				t.Errorf("%s: %q, %v; want %s", tc.listen, got, err, tc.code)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.listen, got, err, tc.want)
		}
	}
}

// GET /v1/status/history: the daemon's samples; the admin's (and the
// page's) only; 404 without a history.
func TestStatusHistoryRoute(t *testing.T) {
	t.Parallel()
	h, err := daemon.NewHistory(daemon.HistoryConfig{Now: clocktest.New().Now})
	if err != nil {
		t.Fatal(err)
	}
	e := setupUI(t, envOptions{cfg: Config{History: h}})
	h.SetStore(e.store)
	r := e.must(http.StatusOK, req{method: "GET", path: "/v1/status/history"})
	jsonEq(t, r.body, `{"interval_seconds":10,"samples":[]}`)
	e.must(http.StatusCreated, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"title":"t"}}`})
	if _, err := h.Sample(); err != nil {
		t.Fatal(err)
	}
	r = e.must(http.StatusOK, req{method: "GET", path: "/v1/status/history"})
	jsonEq(t, r.body, `{"interval_seconds":10,"samples":[{"at":"`+clocktest.Start.Format(time.RFC3339)+`","queued":1,"pending":1,"failed":0,"sent":0}]}`)
	sess := e.signIn()
	if p := e.ui(uiReq{path: "/ui/api/v1/status/history", session: sess}); p.status != http.StatusOK || !strings.Contains(p.raw, `"queued":1`) {
		t.Errorf("through the page: %d %s", p.status, p.raw)
	}
	tok := e.addApp("notes", []string{"note"}, true)
	if r := e.do(req{method: "GET", path: "/v1/status/history", header: bearer(tok)}); r.status != http.StatusForbidden || r.code() != CodeAdminRequired {
		t.Errorf("app token: %d %s", r.status, r.raw)
	}
	e.must(http.StatusBadRequest, req{method: "GET", path: "/v1/status/history?since=1"})

	none := setup(t, envOptions{})
	if r := none.do(req{method: "GET", path: "/v1/status/history"}); r.status != http.StatusNotFound || r.code() != CodeNotFound {
		t.Errorf("without a history: %d %s", r.status, r.raw)
	}
}
