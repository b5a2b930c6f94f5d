package localapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestGuard(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", cfg: Config{AllowedOrigins: []string{"http://localhost:3000"}}})
	tests := []struct {
		name       string
		rq         req
		wantStatus int
		wantCode   string
	}{
		{"no token", req{method: "GET", path: "/v1/status", header: map[string]string{"Authorization": ""}}, 401, CodeUnauthorized},
		{"wrong token", req{method: "GET", path: "/v1/status", header: map[string]string{"Authorization": "Bearer " + testToken[:63] + "0"}}, 401, CodeUnauthorized},
		{"short token", req{method: "GET", path: "/v1/status", header: map[string]string{"Authorization": "Bearer x"}}, 401, CodeUnauthorized},
		{"basic scheme", req{method: "GET", path: "/v1/status", header: map[string]string{"Authorization": "Basic " + testToken}}, 401, CodeUnauthorized},
		{"token in query is not enough", req{method: "GET", path: "/v1/status?token=" + testToken, header: map[string]string{"Authorization": ""}}, 401, CodeUnauthorized},
		{"lowercase scheme", req{method: "GET", path: "/v1/status", header: map[string]string{"Authorization": "bearer " + testToken}}, 200, ""},
		{"rebound host", req{method: "GET", path: "/v1/status", host: "evil.example"}, 403, CodeForbiddenHost},
		{"rebound host with port", req{method: "GET", path: "/v1/status", host: "evil.example:7419"}, 403, CodeForbiddenHost},
		{"host that starts like localhost", req{method: "GET", path: "/v1/status", host: "localhost.evil.example"}, 403, CodeForbiddenHost},
		{"LAN address", req{method: "GET", path: "/v1/status", host: "192.168.1.10:7419"}, 403, CodeForbiddenHost},
		{"host checked before token", req{method: "GET", path: "/v1/status", host: "evil.example", header: map[string]string{"Authorization": ""}}, 403, CodeForbiddenHost},
		{"localhost", req{method: "GET", path: "/v1/status", host: "localhost:7419"}, 200, ""},
		{"LOCALHOST", req{method: "GET", path: "/v1/status", host: "LOCALHOST"}, 200, ""},
		{"127.0.0.2", req{method: "GET", path: "/v1/status", host: "127.0.0.2:1"}, 200, ""},
		{"ipv6 loopback", req{method: "GET", path: "/v1/status", host: "[::1]:7419"}, 200, ""},
		{"foreign origin", req{method: "GET", path: "/v1/status", header: map[string]string{"Origin": "https://evil.example"}}, 403, CodeForbiddenOrigin},
		{"null origin", req{method: "GET", path: "/v1/status", header: map[string]string{"Origin": "null"}}, 403, CodeForbiddenOrigin},
		{"origin differs in port", req{method: "GET", path: "/v1/status", header: map[string]string{"Origin": "http://localhost:3001"}}, 403, CodeForbiddenOrigin},
		{"foreign origin preflight", req{method: "OPTIONS", path: "/v1/entities/note", header: map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST", "Authorization": ""}}, 403, CodeForbiddenOrigin},
		{"allowed origin", req{method: "GET", path: "/v1/status", header: map[string]string{"Origin": "http://localhost:3000"}}, 200, ""},
		{"allowed origin still needs the token", req{method: "GET", path: "/v1/status", header: map[string]string{"Origin": "http://localhost:3000", "Authorization": ""}}, 401, CodeUnauthorized},
		{"allowed origin preflight", req{method: "OPTIONS", path: "/v1/entities/note", header: map[string]string{"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST", "Authorization": ""}}, 204, ""},
		{"unknown route", req{method: "GET", path: "/v2/status"}, 404, CodeNotFound},
		{"root", req{method: "GET", path: "/"}, 404, CodeNotFound},
		{"unclean path", req{method: "GET", path: "/v1//status"}, 404, CodeNotFound},
		{"dot segments", req{method: "GET", path: "/v1/x/../status"}, 404, CodeNotFound},
		{"wrong method", req{method: "PUT", path: "/v1/status"}, 405, CodeMethodNotAllowed},
		{"wrong method on entity", req{method: "PUT", path: "/v1/entities/note/n1"}, 405, CodeMethodNotAllowed},
		{"unknown route needs the token first", req{method: "GET", path: "/nope", header: map[string]string{"Authorization": ""}}, 401, CodeUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(tt.rq)
			if r.status != tt.wantStatus || r.code() != tt.wantCode {
				t.Fatalf("status %d code %q, want %d %q: %s", r.status, r.code(), tt.wantStatus, tt.wantCode, r.raw)
			}
			switch {
			case r.status == 401:
				if r.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			case r.status == 405:
				if r.header.Get("Allow") == "" {
					t.Error("405 without Allow")
				}
			}
			if origin := tt.rq.header["Origin"]; origin == "http://localhost:3000" {
				if got := r.header.Get("Access-Control-Allow-Origin"); got != origin {
					t.Errorf("Access-Control-Allow-Origin = %q, want %q", got, origin)
				}
			} else if got := r.header.Get("Access-Control-Allow-Origin"); got != "" {
				t.Errorf("Access-Control-Allow-Origin = %q for origin %q", got, origin)
			}
		})
	}
}

// TestAltToken covers the hook the WebSocket events endpoint will use:
// the token as ?token= or a subprotocol, only on registered GET paths.
func TestAltToken(t *testing.T) {
	t.Parallel()
	s := &Server{tokenSum: tokenDigest(testToken), altTokenPaths: map[string]bool{"/v1/events": true}}
	tests := []struct {
		method, target, protocol string
		want                     bool
	}{
		{"GET", "/v1/events?token=" + testToken, "", true},
		{"GET", "/v1/events", "chat, " + wsTokenProtocolPrefix + testToken, true},
		{"GET", "/v1/events?token=wrong", "", false},
		{"GET", "/v1/events", "", false},
		{"GET", "/v1/status?token=" + testToken, "", false},
		{"POST", "/v1/events?token=" + testToken, "", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		if tt.protocol != "" {
			r.Header.Set("Sec-WebSocket-Protocol", tt.protocol)
		}
		if _, got := s.authorized(r); got != tt.want {
			t.Errorf("%s %s (protocol %q): authorized = %v, want %v", tt.method, tt.target, tt.protocol, got, tt.want)
		}
	}
}

func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{cfg: Config{AllowedHosts: []string{"192.168.1.10"}}})
	e.must(http.StatusOK, req{method: "GET", path: "/v1/status", host: "192.168.1.10:7419"})
	e.must(http.StatusForbidden, req{method: "GET", path: "/v1/status", host: "192.168.1.11:7419"})
}
