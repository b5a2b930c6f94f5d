package localapi

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// securityHeaders go on every answer, errors included (as Tailscale's
// LocalAPI does): nothing the API returns may run, frame or be sniffed as
// something else in a browser, or be cached.
var securityHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'"},
	{"X-Frame-Options", "DENY"},
	{"X-Content-Type-Options", "nosniff"},
	{"Cache-Control", "no-store"},
}

// Headers of the API besides the standard ones.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
)

// guard is the one wrapper in front of every route. In order: security
// headers; Host must be a loopback name (DNS rebinding; TCP only, see
// fromUnixSocket); Origin must be absent or allowed (cross-site
// requests), with CORS preflights answered for allowed origins; the
// bearer token, the admin token or an app's; the body size limit; the
// route's scope (an app token gets 403 on the admin routes, and on the
// writing ones when it is read-only). Handlers never re-check any of
// it. What only a handler knows, it checks itself: the entity types and
// account an app token reaches (lookupType, visibleOperation) and, at
// commit, that the app was not removed meanwhile (grant.commit). The
// mux's own 404 and 405 answers are rewritten into the API's error
// shape. A panic in a handler is answered 500 internal and logged
// (recoverPanic).
//
// The status page's prefix, /ui/, leaves the guard after the Host check
// for serveUI (ui.go): a loopback Host only, its own Origin rule (absent
// or exactly the page's own) and the session cookie instead of the
// token, then dispatch as for the admin token under /ui/api/.
func (s *Server) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &panicWriter{ResponseWriter: w, writeTimeout: s.writeTimeout}
		defer s.recoverPanic(pw, r)
		limitBody(w, r, s.bodyTimeout)
		h := w.Header()
		for _, kv := range securityHeaders {
			h.Set(kv[0], kv[1])
		}
		// No browser can reach the Unix socket, whose peer the kernel
		// has shown to be this user: DNS rebinding needs TCP.
		if !fromUnixSocket(r) && !s.allowedHost(r.Host) {
			s.gate.refuseUnauth(w, r)
			writeError(w, http.StatusForbidden, CodeForbiddenHost, "Host "+quoteHeader(r.Host)+" is not a loopback name")
			return
		}
		if isUIPath(r.URL.Path) {
			// The status page: its own Origin rule and the session
			// cookie instead of the token (ui.go).
			s.serveUI(pw, r, mux)
			return
		}
		if origin, ok := r.Header["Origin"]; ok {
			if len(origin) != 1 || !s.origins[origin[0]] {
				s.gate.refuseUnauth(w, r)
				writeError(w, http.StatusForbidden, CodeForbiddenOrigin, "Origin "+quoteHeader(strings.Join(origin, ", "))+" is not allowed")
				return
			}
			setCORS(h, origin[0])
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key")
				h.Set("Access-Control-Max-Age", "600")
				s.gate.refuseUnauth(w, r)
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		g, ok := s.authorized(r)
		if !ok {
			s.gate.refuseUnauth(w, r)
			h.Set("WWW-Authenticate", `Bearer realm="syncd"`)
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "missing, wrong or revoked bearer token (Authorization: Bearer <the admin token from the data directory's api-token file, or an app token from syncd apps add>)")
			return
		}
		s.gate.authenticated(r)
		s.dispatch(pw, r, mux, g)
	})
}

// dispatch serves an authenticated request, the caller's grant g (nil:
// the admin token, or the status page's session): the body size limit,
// the path's shape, the route's scope, then the route's handler.
func (s *Server) dispatch(pw *panicWriter, r *http.Request, mux *http.ServeMux, g *grant) {
	w := pw
	r = withGrant(r, g)
	limit := s.maxBody
	if r.URL.Path == batchPath {
		limit = max(limit, DefaultMaxBatchBytes)
	}
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body is larger than "+itoa(limit)+" bytes")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)

	if seg, ok := dotID(r.URL.Path); ok {
		// An id "." or ".." (escaped as %2E): the mux would clean it
		// away and address another resource.
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "id "+strconv.Quote(seg)+" in the path: "+errDotID.Error())
		return
	}
	if p := cleanPath(r.URL.Path); p != r.URL.Path {
		// The mux would redirect; an API client should fix its URL.
		writeError(w, http.StatusNotFound, CodeNotFound, "no route "+r.Method+" "+r.URL.Path+" (did you mean "+p+"?)")
		return
	}
	_, pattern := mux.Handler(r)
	if pattern == "" {
		s.unrouted(w, r, mux)
		return
	}
	if pattern == uiLinksPattern && uiSessionFrom(r).sess.ended != nil {
		// A page's session making sign-in links would make sessions of
		// its own: a stolen cookie would outlive its sign-out and its 12
		// hours, and could use up the links syncd ui needs.
		writeError(w, http.StatusForbidden, CodeAdminRequired, r.Method+" "+r.URL.Path+" needs the admin token (syncd ui); the status page's session cannot make sign-in links")
		return
	}
	if g != nil {
		switch s.scopes[pattern] {
		case scopeAdmin:
			writeError(w, http.StatusForbidden, CodeAdminRequired, r.Method+" "+r.URL.Path+" needs the admin token; app "+strconv.Quote(g.name)+"'s token cannot use it")
			return
		case scopeWrite:
			if g.readOnly {
				writeError(w, http.StatusForbidden, CodeReadOnly, "app "+strconv.Quote(g.name)+"'s token is read-only: "+r.Method+" "+r.URL.Path+" writes")
				return
			}
		}
	}
	mux.ServeHTTP(pw, r)
}

// recoverPanic answers a request whose handler panicked with 500
// internal, and logs the panic with its stack at ERROR. Every lock in
// the daemon and the queue is released with defer, so the panic leaves
// nothing held; the recover keeps the client from seeing a dropped
// connection and puts the cause in the daemon's log. An answer already
// begun, or a hijacked connection (a WebSocket), cannot take a 500: the
// connection is aborted instead. http.ErrAbortHandler passes through.
func (s *Server) recoverPanic(pw *panicWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	s.logger.Error("localapi: handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	if pw.wrote || pw.hijacked {
		panic(http.ErrAbortHandler) // net/http closes the connection quietly
	}
	writeError(pw.ResponseWriter, http.StatusInternalServerError, CodeInternal, "internal error; see the daemon's log")
}

// panicWriter records whether the answer has begun, so that a panic
// after it aborts the connection instead of appending a second answer.
// Unwrap gives http.ResponseController the connection's own writer
// (deadlines, flushes); Hijack is seen here so that a panic after a
// WebSocket upgrade writes nothing.
//
// It also starts the answer's write deadline (Config.WriteTimeout) when
// the answer begins.
type panicWriter struct {
	http.ResponseWriter
	writeTimeout time.Duration
	wrote        bool
	hijacked     bool
}

func (p *panicWriter) begin() {
	if !p.wrote {
		p.wrote = true
		if p.writeTimeout > 0 {
			_ = http.NewResponseController(p.ResponseWriter).SetWriteDeadline(time.Now().Add(p.writeTimeout))
		}
	}
}

func (p *panicWriter) WriteHeader(status int) {
	p.begin()
	p.ResponseWriter.WriteHeader(status)
}

func (p *panicWriter) Write(b []byte) (int, error) {
	p.begin()
	return p.ResponseWriter.Write(b)
}

func (p *panicWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

func (p *panicWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	p.hijacked = true
	return http.NewResponseController(p.ResponseWriter).Hijack()
}

func setCORS(h http.Header, origin string) {
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", headerReplayed)
}

// unrouted answers a request no pattern matched. The mux decides between
// 404 and 405 (with its Allow header); both are rewritten into the
// API's error shape.
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	rec := &headerRecorder{header: make(http.Header)}
	h, _ := mux.Handler(r)
	h.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusMethodNotAllowed:
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path+" (allowed: "+rec.header.Get("Allow")+")")
	default:
		writeError(w, http.StatusNotFound, CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
	}
}

// dotID reports whether p puts "." or ".." where a route takes an entity
// type, an entity id or an operation id, and returns that segment.
func dotID(p string) (string, bool) {
	seg := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(seg) < 3 || seg[0] != "v1" {
		return "", false
	}
	var ids []string
	switch seg[1] {
	case "entities":
		ids = seg[2:min(len(seg), 4)]
	case "operations":
		ids = seg[2:3]
	}
	for _, s := range ids {
		if s == "." || s == ".." {
			return s, true
		}
	}
	return "", false
}

// cleanPath is the path the mux would redirect to: path.Clean, keeping a
// trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// headerRecorder captures the status and headers the mux's built-in
// answers write, and drops their text body.
type headerRecorder struct {
	header http.Header
	status int
}

func (r *headerRecorder) Header() http.Header { return r.header }
func (r *headerRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *headerRecorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(b), nil
}

// allowedHost reports whether the request's Host names this machine's
// loopback interface (or a host configured in AllowedHosts). A web page
// on a rebound DNS name reaches 127.0.0.1 with its own name in Host.
func (s *Server) allowedHost(hostport string) bool {
	host := normalizeHost(hostport)
	if host == "localhost" || s.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// normalizeHost strips the port and IPv6 brackets and lowercases. A
// port that is not a number, or a bracket without its pair, leaves the
// text as it is: no name is allowed with them (a Host of
// "127.0.0.1:80@evil.example" names evil.example to a URL parser).
func normalizeHost(hostport string) string {
	host := hostport
	if h, port, err := net.SplitHostPort(hostport); err == nil {
		if strings.Trim(port, "0123456789") != "" {
			return strings.ToLower(hostport)
		}
		host = h
	} else if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return strings.ToLower(host)
}

func tokenDigest(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// authorized checks the bearer token: the admin token (g nil), compared
// in constant time (digests of equal length are compared, so not even
// the token's length leaks), or a registered app's (its grant), found by
// the token's digest: a lookup's timing can tell at most something about
// a digest, from which no token can be made.
func (s *Server) authorized(r *http.Request) (g *grant, ok bool) {
	token, ok := s.requestToken(r)
	if !ok {
		return nil, false
	}
	sum := tokenDigest(token)
	if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1 {
		return nil, true
	}
	return s.apps.lookup(sum)
}

// requestToken returns the token a request carries: the Authorization
// header, or, on the paths in altTokenPaths (WebSocket upgrades, where a
// browser cannot set headers), a ?token= query parameter or a
// "syncd.token.<token>" WebSocket subprotocol.
func (s *Server) requestToken(r *http.Request) (string, bool) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, token, ok := strings.Cut(auth, " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return "", false
		}
		return token, true
	}
	if r.Method != http.MethodGet || !s.altTokenPaths[r.URL.Path] {
		return "", false
	}
	if t := r.URL.Query().Get("token"); t != "" {
		return t, true
	}
	for _, list := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(list, ",") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(p), wsTokenProtocolPrefix); ok && t != "" {
				return t, true
			}
		}
	}
	return "", false
}

// wsTokenProtocolPrefix prefixes the token when a browser passes it as a
// WebSocket subprotocol.
const wsTokenProtocolPrefix = "syncd.token."

// quoteHeader quotes a header value for an error message, cut short.
func quoteHeader(v string) string {
	if len(v) > 100 {
		v = v[:100] + "..."
	}
	return `"` + strings.ToValidUTF8(v, "?") + `"`
}
