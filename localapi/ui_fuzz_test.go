package localapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzUIGuard: whatever path under /ui/, method, Origin, cookie, CSRF
// token and Authorization header a request carries, the status page's
// guard never answers 5xx; without the live session it answers 4xx (or
// the redirect of /ui), shows no data, sets no session and writes
// nothing; with it, a foreign Origin is 403 forbidden_origin, and a
// request other than a GET or HEAD without the page's Origin and the
// session's CSRF token is refused and writes nothing.
func FuzzUIGuard(f *testing.F) {
	const own = "http://127.0.0.1:7419"
	for _, s := range []struct {
		method       uint8
		path, origin string
		useOrigin    bool
		cookie       string
		live         bool
		csrf         string
		liveCSRF     bool
		auth         string
	}{
		{0, "", "", false, "", false, "", false, ""},
		{0, "api/v1/status", "", false, "", true, "", false, ""},
		{0, "api/v1/entities/note/secret-note", "https://evil.example", true, "", true, "", false, ""},
		{2, "api/v1/entities/note", own, true, "", true, "", true, ""},
		{2, "api/v1/entities/note", "http://127.0.0.1:1", true, "", true, "", true, ""},
		{2, "api/v1/apps", own, true, "", true, "x", false, ""},
		{5, "api/v1/entities/note/secret-note", "", false, "", true, "", true, ""},
		{5, "api/v1/entities/note/secret-note", own, true, "forged", false, "", true, "Bearer " + testToken},
		{0, "session", "", false, "", false, "", false, "Bearer " + testToken},
		{0, "login?code=" + testToken, "", false, "", false, "", false, ""},
		{2, "logout", own, true, "", true, "", false, ""},
		{0, "api/v1/events", own, true, "", false, "", false, ""},
		{0, "assets/../api/v1/status", "", false, "", true, "", false, ""},
		{0, "api/v1/entities/note/%2E%2E", "", false, "", true, "", false, ""},
		{6, "api/v1/entities/note", own, true, "", true, "", true, ""},
	} {
		f.Add(s.method, s.path, s.origin, s.useOrigin, s.cookie, s.live, s.csrf, s.liveCSRF, s.auth)
	}
	e := setup(f, envOptions{account: "acct-ui"})
	e.must(http.StatusCreated, req{method: "POST", path: "/v1/entities/note", body: `{"id":"secret-note","data":{"title":"secret title"}}`})
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	f.Fuzz(func(t *testing.T, m uint8, path, origin string, useOrigin bool, cookie string, live bool, csrf string, liveCSRF bool, auth string) {
		target := "/ui/" + path
		u, err := url.ParseRequestURI(target)
		if err != nil || strings.ContainsAny(target, " \t\r\n#") {
			t.Skip()
		}
		method := methods[int(m)%len(methods)]
		code, _, err := e.srv.ui.newCode()
		if err != nil {
			t.Fatal(err)
		}
		id, sess, ok, err := e.srv.ui.redeem(code)
		if err != nil || !ok {
			t.Fatal(err)
		}
		r := httptest.NewRequest(method, "http://127.0.0.1:7419"+u.RequestURI(), nil)
		if useOrigin {
			r.Header.Set("Origin", origin)
		}
		if live {
			cookie = id
		}
		if cookie != "" {
			r.Header.Set("Cookie", UICookieName+"="+cookie)
		}
		if liveCSRF {
			csrf = sess.csrf
		}
		if csrf != "" {
			r.Header.Set(HeaderCSRFToken, csrf)
		}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if strings.ContainsAny(origin+cookie+csrf+auth, "\r\n\x00") {
			t.Skip()
		}
		te := *e // snapshot reports to t, not to f
		te.t = t
		before := te.snapshot()
		w := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(w, r)
		status, body := w.Code, w.Body.String()
		if status >= 500 {
			t.Fatalf("%s %s: %d %s", method, target, status, body)
		}
		hasSession := live || cookie == id
		safe := method == "GET" || method == "HEAD"
		originOK := !useOrigin || strings.EqualFold(origin, own)
		writeOK := hasSession && originOK && useOrigin && (csrf == sess.csrf)
		if !hasSession {
			if !(status >= 400 || status == http.StatusSeeOther && r.URL.Path == "/ui") {
				t.Fatalf("no session: %s %s: %d %s", method, target, status, body)
			}
			for _, secret := range []string{"secret-note", "secret title", "acct-ui", sess.csrf} {
				// An error message may quote the request's own path.
				if strings.Contains(body, secret) && !strings.Contains(target, secret) {
					t.Fatalf("no session: %s %s shows %q", method, target, secret)
				}
			}
			for _, c := range w.Result().Cookies() {
				if c.Name == UICookieName && c.Value != "" {
					t.Fatalf("no session: %s %s set a session", method, target)
				}
			}
		}
		if hasSession && !originOK && (status != http.StatusForbidden || !strings.Contains(body, CodeForbiddenOrigin)) {
			t.Fatalf("foreign Origin %q: %s %s: %d %s", origin, method, target, status, body)
		}
		if !safe && !writeOK {
			if status < 400 && !(status == http.StatusSeeOther && r.URL.Path == "/ui") {
				t.Fatalf("unauthorized write: %s %s: %d %s", method, target, status, body)
			}
			if after := te.snapshot(); !after.equal(before) {
				t.Fatalf("a refused %s %s wrote", method, target)
			}
		}
		e.srv.ui.end(id)
	})
}
