package idempotency

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		vals []string
		want string
		ok   bool
	}{
		{[]string{"8b62d456-demo-4d4e"}, "8b62d456-demo-4d4e", true},
		{[]string{`"8b62d456-demo-4d4e"`}, "8b62d456-demo-4d4e", true},
		{[]string{"  k  "}, "k", true},
		{nil, "", false},
		{[]string{""}, "", false},
		{[]string{`""`}, "", false},
		{[]string{"a", "b"}, "", false},
		{[]string{strings.Repeat("k", MaxKeyLength)}, strings.Repeat("k", MaxKeyLength), true},
		{[]string{strings.Repeat("k", MaxKeyLength+1)}, "", false},
		{[]string{"tab\tinside"}, "", false},
		{[]string{"ünicode"}, "", false},
	}
	for _, tt := range tests {
		got, ok := parseKey(tt.vals)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseKey(%q) = %q, %v; want %q, %v", tt.vals, got, ok, tt.want, tt.ok)
		}
	}
}

func TestStorable(t *testing.T) {
	t.Parallel()
	tests := map[int]bool{200: true, 201: true, 204: true, 400: true, 404: true, 409: true, 410: true, 422: true,
		401: false, 403: false, 408: false, 425: false, 429: false, 500: false, 502: false, 503: false}
	for status, want := range tests {
		if got := Storable(status); got != want {
			t.Errorf("Storable(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestOutcomeString(t *testing.T) {
	t.Parallel()
	if OutcomeReplayed.String() != "replayed" || OutcomeFailed.String() != "failed" || Outcome(99).String() != "outcome(99)" {
		t.Fatal("Outcome.String")
	}
}

func TestDefaultRoute(t *testing.T) {
	t.Parallel()
	route := func(target string) string {
		r, err := http.NewRequest("POST", "http://h"+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		return DefaultRoute(r)
	}
	tests := []struct{ a, b string }{
		{"/x", "/x"},
		{"/x?a=1&b=2", "/x?b=2&a=1"},
		{"/x?a=%20", "/x?a=+"},
	}
	for _, tt := range tests {
		if route(tt.a) != route(tt.b) {
			t.Errorf("%s and %s are different routes: %q %q", tt.a, tt.b, route(tt.a), route(tt.b))
		}
	}
	differ := []struct{ a, b string }{
		{"/x?dryRun=true", "/x?dryRun=false"},
		{"/x?a=1&a=2", "/x?a=2&a=1"},
		{"/x?%zz", "/x?%zy"},
	}
	for _, tt := range differ {
		if route(tt.a) == route(tt.b) {
			t.Errorf("%s and %s are one route: %q", tt.a, tt.b, route(tt.a))
		}
	}
}

func TestKeyHashHidesKey(t *testing.T) {
	t.Parallel()
	h := keyHash("8b62d456-demo-4d4e")
	if len(h) != 12 || strings.Contains("8b62d456-demo-4d4e", h) || h != keyHash("8b62d456-demo-4d4e") {
		t.Fatalf("keyHash = %q", h)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(method, route, body string, exclude ...string) string {
		return Fingerprint(method, route, []byte(body), exclude)
	}
	base := fp("POST", "/v1/entries", `{"clientId":"c","data":{"a":1,"b":[1,2]},"payloadVersion":1}`)
	same := []struct{ name, got string }{
		{"key order and space", fp("POST", "/v1/entries", " {\"payloadVersion\":1,\n\"data\":{\"b\":[1, 2],\"a\":1}, \"clientId\":\"c\"}\n")},
		{"method case", fp("post", "/v1/entries", `{"clientId":"c","data":{"a":1,"b":[1,2]},"payloadVersion":1}`)},
		{"string escapes", fp("POST", "/v1/entries", `{"clientId":"\u0063","data":{"a":1,"b":[1,2]},"payloadVersion":1}`)},
		{"excluded metadata", fp("POST", "/v1/entries", `{"clientId":"c","sentAt":"x","data":{"a":1,"b":[1,2]},"payloadVersion":1}`, "sentAt")},
	}
	for _, tt := range same {
		if tt.got != base {
			t.Errorf("%s: fingerprint differs", tt.name)
		}
	}
	differ := []struct{ name, got string }{
		{"method", fp("PUT", "/v1/entries", `{"clientId":"c","data":{"a":1,"b":[1,2]},"payloadVersion":1}`)},
		{"route", fp("POST", "/v1/tasks", `{"clientId":"c","data":{"a":1,"b":[1,2]},"payloadVersion":1}`)},
		{"value", fp("POST", "/v1/entries", `{"clientId":"c","data":{"a":2,"b":[1,2]},"payloadVersion":1}`)},
		{"array order", fp("POST", "/v1/entries", `{"clientId":"c","data":{"a":1,"b":[2,1]},"payloadVersion":1}`)},
		{"number spelling", fp("POST", "/v1/entries", `{"clientId":"c","data":{"a":1.0,"b":[1,2]},"payloadVersion":1}`)},
		{"nested field not excluded", fp("POST", "/v1/entries", `{"clientId":"c","data":{"a":1,"b":[1,2],"sentAt":"x"},"payloadVersion":1}`, "sentAt")},
		{"extra field", fp("POST", "/v1/entries", `{"clientId":"c","data":{"a":1,"b":[1,2]},"payloadVersion":1,"x":null}`)},
	}
	for _, tt := range differ {
		if tt.got == base {
			t.Errorf("%s: fingerprint is the same", tt.name)
		}
	}
	if fp("DELETE", "/x", "") != fp("DELETE", "/x", " \n") || fp("DELETE", "/x", "") != fp("DELETE", "/x", "null") {
		t.Error("empty body is not null")
	}
	if fp("POST", "/x", "not json") == fp("POST", "/x", "not json!") || fp("POST", "/x", "{} {}") == fp("POST", "/x", "{}") {
		t.Error("raw bodies collide")
	}
	if len(base) != 64 {
		t.Errorf("fingerprint %q is not hex SHA-256", base)
	}
}

// FuzzFingerprint: any body fingerprints without panicking, the same way
// twice, and a JSON body re-indented is the same request.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"clientId":"c","data":{"a":1}}`, `[1,2]`, `"x"`, ``, `{`, `{"a":"\u00e9"}`, `1e3`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a := Fingerprint("POST", "/r", body, []string{"sentAt"})
		if b := Fingerprint("POST", "/r", bytes.Clone(body), []string{"sentAt"}); a != b {
			t.Fatal("not deterministic")
		}
		if !json.Valid(body) {
			return
		}
		var ind bytes.Buffer
		if err := json.Indent(&ind, body, "", "  "); err != nil {
			return
		}
		if c := Fingerprint("POST", "/r", ind.Bytes(), []string{"sentAt"}); c != a {
			t.Fatalf("indented %q fingerprints differently from %q", ind.Bytes(), body)
		}
	})
}
