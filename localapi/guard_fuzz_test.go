package localapi

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The fuzz targets of the guard's parsing of the Host and the token; the
// list of every target is in docs/fuzzing.md.

// FuzzGuardHost: allowedHost never panics; what it accepts names a
// loopback address, "localhost" or a configured host, read as a URL's
// host is (net/url, as a browser reads the address it sends in Host),
// whenever that reading succeeds; and neither the letter case nor a
// port changes the answer.
func FuzzGuardHost(f *testing.F) {
	for _, h := range []string{"localhost", "localhost:7419", "LOCALHOST", "127.0.0.1", "127.0.0.2:1", "[::1]:7419", "::1", "[::1]",
		"box.lan", "BOX.lan:80", "evil.example", "localhost.evil.example", "192.168.1.10:7419", "[::ffff:127.0.0.1]:80",
		"127.0.0.1:80@evil.example", "localhost]", "[localhost]:1", "127.1", "0x7f.0.0.1", "localhost.", "", ":80", "[fe80::1%25lo]:1"} {
		f.Add(h)
	}
	s := &Server{hosts: map[string]bool{"box.lan": true, "192.168.1.10": false}}
	f.Fuzz(func(t *testing.T, host string) {
		ok := s.allowedHost(host)
		if ok {
			name := normalizeHost(host)
			if ip := net.ParseIP(name); !(name == "localhost" || s.hosts[name] || ip != nil && ip.IsLoopback()) {
				t.Fatalf("allowedHost(%q) accepts %q", host, name)
			}
			if u, err := url.Parse("http://" + host + "/"); err == nil {
				name := strings.ToLower(u.Hostname())
				if ip := net.ParseIP(name); !(name == "localhost" || s.hosts[name] || ip != nil && ip.IsLoopback()) {
					t.Fatalf("allowedHost(%q) accepts a Host that names %q", host, u.Hostname())
				}
			}
		}
		if up := strings.ToUpper(host); s.allowedHost(up) != ok {
			t.Fatalf("allowedHost(%q) = %v but allowedHost(%q) = %v", host, ok, up, !ok)
		}
		if _, _, err := net.SplitHostPort(host); err != nil && !strings.Contains(host, ":") {
			if p := host + ":7419"; s.allowedHost(p) != ok {
				t.Fatalf("allowedHost(%q) = %v but allowedHost(%q) = %v", host, ok, p, !ok)
			}
		}
	})
}

// FuzzGuardToken: requestToken never panics; a token it returns is not
// empty and has no surrounding space; the Authorization header, when
// present, decides alone; the other forms count only on a GET of an
// event path; and the admin token is recognized exactly when the token
// is it.
func FuzzGuardToken(f *testing.F) {
	const admin = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, s := range []struct{ auth, query, proto, method, path string }{
		{"Bearer " + admin, "", "", "GET", "/v1/status"},
		{"bearer  " + admin + " ", "", "", "GET", "/v1/status"},
		{"Bearer", "", "", "GET", "/v1/status"},
		{"Bearer    ", "", "", "GET", "/v1/status"},
		{"Bearer \t", "", "", "GET", "/v1/status"},
		{"Basic " + admin, "", "", "GET", "/v1/status"},
		{"", "token=" + admin, "", "GET", "/v1/events"},
		{"", "token=" + admin, "", "POST", "/v1/events"},
		{"", "token=" + admin, "", "GET", "/v1/status"},
		{"", "token=%zz", "", "GET", "/v1/events"},
		{"", "", "json, syncd.token." + admin, "GET", "/v1/events"},
		{"", "", "syncd.token.", "GET", "/v1/events"},
		{"Bearer x", "token=" + admin, "", "GET", "/v1/events"},
	} {
		f.Add(s.auth, s.query, s.proto, s.method, s.path)
	}
	s := &Server{tokenSum: tokenDigest(admin), altTokenPaths: map[string]bool{"/v1/events": true}}
	f.Fuzz(func(t *testing.T, auth, query, proto, method, path string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if proto != "" {
			r.Header.Set("Sec-WebSocket-Protocol", proto)
		}
		token, ok := s.requestToken(r)
		if !ok {
			if token != "" {
				t.Fatalf("no token, yet %q", token)
			}
		} else {
			if token == "" || strings.TrimSpace(token) != token && auth != "" {
				t.Fatalf("requestToken = %q from Authorization %q", token, auth)
			}
			if token == "" {
				t.Fatal("an empty token")
			}
		}
		if auth != "" {
			scheme, rest, _ := strings.Cut(auth, " ")
			if ok != (strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(rest) != "") {
				t.Fatalf("Authorization %q gives token %q, %v", auth, token, ok)
			}
			if ok && token != strings.TrimSpace(rest) {
				t.Fatalf("Authorization %q gives token %q", auth, token)
			}
		} else if ok && (method != http.MethodGet || !s.altTokenPaths[path]) {
			t.Fatalf("a token from the query or subprotocol on %s %s", method, path)
		}
		g, authed := s.authorized(r)
		if authed != (ok && token == admin) || g != nil {
			t.Fatalf("authorized = %v, %v for token %q (%v)", g, authed, token, ok)
		}
	})
}

// What FuzzGuardHost and FuzzGuardToken found, through the whole guard:
// a Host whose port is not a number, or with an unpaired bracket, is
// refused; a bearer token of spaces is no token.
func TestGuardFuzzFindings(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	for _, tt := range []struct {
		name     string
		rq       req
		status   int
		wantCode string
	}{
		{"port with a user part", req{method: "GET", path: "/v1/status", host: "127.0.0.1:80@evil.example"}, 403, CodeForbiddenHost},
		{"unpaired bracket", req{method: "GET", path: "/v1/status", host: "localhost]"}, 403, CodeForbiddenHost},
		{"bracketed loopback", req{method: "GET", path: "/v1/status", host: "[::1]"}, 200, ""},
		{"blank bearer token", req{method: "GET", path: "/v1/status", header: map[string]string{"Authorization": "Bearer    "}}, 401, CodeUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if r := e.do(tt.rq); r.status != tt.status || r.code() != tt.wantCode {
				t.Fatalf("status %d code %q, want %d %q: %s", r.status, r.code(), tt.status, tt.wantCode, r.raw)
			}
		})
	}
}
