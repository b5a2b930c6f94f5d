package remote

import (
	"net"
	"net/http"
	"strings"
)

// CodeForbiddenHost answers a request whose Host is not a loopback name
// when Config.LoopbackHostsOnly is set.
const CodeForbiddenHost = "forbidden_host"

// loopbackHostsOnly refuses requests whose Host header does not name a
// loopback address (DNS rebinding).
func loopbackHostsOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isLoopbackHost(r.Host) {
			writeError(w, r, http.StatusForbidden, CodeForbiddenHost, "this server answers only requests addressed to a loopback name")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
