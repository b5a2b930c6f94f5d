package remote

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{DataDir: t.TempDir(), DevTokens: true, LoopbackHostsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, tt := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:7420", http.StatusOK},
		{"localhost:7420", http.StatusOK},
		{"[::1]:7420", http.StatusOK},
		{"127.9.9.9", http.StatusOK},
		{"attacker.example:7420", http.StatusForbidden},
		{"192.168.1.10:7420", http.StatusForbidden},
		{"localhost.attacker.example", http.StatusForbidden},
	} {
		r := httptest.NewRequest("GET", "/v1/notes?clientId=x", nil)
		r.Host = tt.host
		r.Header.Set("Authorization", "Bearer alice.1")
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Host %q: status %d, want %d (%s)", tt.host, w.Code, tt.want, w.Body)
		}
	}
}
