package localapi

import (
	"context"
	"embed"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// The status page (docs/ui.md): served under /ui/ on the API's
// listeners, inside the guard, but signed in with a session cookie
// instead of the token.
//
//	POST /v1/ui/links         (admin token) a one-time sign-in link
//	GET  /ui/login?code=C     a valid code: the session cookie, 303 to /ui/
//	GET  /ui/                 the page (index.html)
//	GET  /ui/assets/{file}    the page's other files
//	GET  /ui/session          {csrf_token, expires_at, events_url}
//	POST /ui/logout           ends the session
//	*    /ui/api/{API path}   the whole API, with the admin's rights
//
// Every /ui/ request: Host a loopback name (not an AllowedHosts name;
// the Unix socket is exempt as for the API); Origin absent or exactly
// the page's own, http:// and the request's Host. All but /ui/login:
// the session cookie (no Authorization header counts). Every request
// but a GET or HEAD: the Origin header, and the session's CSRF token in
// X-CSRF-Token; a WebSocket handshake: the Origin header. Every asset
// needs the session as the page does: nothing under /ui/ is served
// without it but the sign-in itself and two small static pages.
const (
	// UICookieName is the session cookie's name.
	UICookieName = "syncd_ui"
	// uiCookiePath scopes the cookie to the page: the API's own routes
	// never see it.
	uiCookiePath = "/ui/"
	uiAPIPrefix  = "/ui/api"
	uiEventsURL  = uiAPIPrefix + eventsPath
	// HeaderCSRFToken carries the session's CSRF token on the page's
	// writes.
	HeaderCSRFToken = "X-CSRF-Token"
)

// uiCSP is the Content-Security-Policy of the page and its files:
// nothing but its own files, and connections back to this origin (CSP
// Level 3 'self' matches the same origin's ws:// too).
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// The page's files: index.html at /ui/, every file at
// /ui/assets/<name>.
//
//go:embed uiassets
var uiFiles embed.FS

// uiAsset is one file of the page, read once.
type uiAsset struct {
	body  []byte
	ctype string
}

// uiAssets maps each file's name under uiassets/ to its content.
var uiAssets = func() map[string]uiAsset {
	m := make(map[string]uiAsset)
	err := fs.WalkDir(uiFiles, "uiassets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		m[strings.TrimPrefix(p, "uiassets/")] = uiAsset{body: b, ctype: uiContentType(p)}
		return nil
	})
	if err != nil {
		panic("localapi: reading the embedded page: " + err.Error())
	}
	return m
}()

// uiContentType is a file's type by its extension (a fixed list, not
// the system's MIME table, which differs between machines).
func uiContentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".ico":
		return "image/x-icon"
	case ".json", ".map":
		return "application/json"
	case ".txt":
		return "text/plain; charset=utf-8"
	case ".woff2":
		return "font/woff2"
	}
	return "application/octet-stream"
}

func isUIPath(p string) bool { return p == "/ui" || strings.HasPrefix(p, "/ui/") }

// uiRoutes is the page's own mux (the API under /ui/api goes to the
// API's mux). The login pattern is the one served without a session.
func (s *Server) uiRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/login", s.uiLogin)
	mux.HandleFunc("GET /ui/{$}", s.uiIndex)
	mux.HandleFunc("GET /ui/assets/{file...}", s.uiAsset)
	mux.HandleFunc("GET /ui/session", s.uiSessionInfo)
	mux.HandleFunc("POST /ui/logout", s.uiLogout)
	return mux
}

const uiLoginPattern = "GET /ui/login"

// uiLinksPattern makes sign-in links: the admin token's alone, never
// the page's (dispatch refuses it under /ui/api).
const uiLinksPattern = "POST /v1/ui/links"

// serveUI is the guard's part for /ui/: after the security headers and
// the Host check of every request.
func (s *Server) serveUI(w *panicWriter, r *http.Request, apiMux *http.ServeMux) {
	refuse := func(status int, code, msg string) {
		s.gate.refuseUnauth(w, r)
		writeError(w, status, code, msg)
	}
	if s.uiOff {
		refuse(http.StatusNotFound, CodeNotFound, "no route "+r.Method+" "+r.URL.Path+": the status page is turned off (ui: off in syncd's config; remove it, or set ui: on, and restart syncd)")
		return
	}
	// The page is for a browser on this machine at a loopback address:
	// not at a name AllowedHosts lets reach a forced listen address, over
	// a network where the cookie could be read.
	if !fromUnixSocket(r) && !isLoopbackHost(r.Host) {
		refuse(http.StatusForbidden, CodeForbiddenHost, "Host "+quoteHeader(r.Host)+" is not a loopback name; the status page is served on loopback only")
		return
	}
	own := "http://" + r.Host
	origin, hasOrigin := r.Header["Origin"]
	if hasOrigin && (len(origin) != 1 || !strings.EqualFold(origin[0], own)) {
		refuse(http.StatusForbidden, CodeForbiddenOrigin, "Origin "+quoteHeader(strings.Join(origin, ", "))+" is not the status page's own ("+quoteHeader(own)+")")
		return
	}
	p := r.URL.Path
	if p == "/ui" {
		s.gate.refuseUnauth(w, r)
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	if cp := cleanPath(p); cp != p {
		refuse(http.StatusNotFound, CodeNotFound, "no route "+r.Method+" "+p+" (did you mean "+cp+"?)")
		return
	}
	var pattern string
	if !strings.HasPrefix(p, uiAPIPrefix+"/") {
		_, pattern = s.uiMux.Handler(r)
	}
	if pattern == uiLoginPattern {
		s.uiMux.ServeHTTP(w, r)
		return
	}
	// A browser says where a request comes from (Fetch Metadata): the
	// page's own requests are same-origin. One from another site, or
	// from another port of this host (same-site, which the cookie does
	// not tell apart), is refused unless it is the user opening a page
	// (a top-level navigation): a foreign page cannot load the page's
	// files or API, not even to learn that the browser is signed in.
	// Clients that are not browsers send no such header.
	if site := r.Header.Get("Sec-Fetch-Site"); (site == "cross-site" || site == "same-site") &&
		!(r.Method == http.MethodGet && r.Header.Get("Sec-Fetch-Mode") == "navigate") {
		refuse(http.StatusForbidden, CodeForbiddenOrigin, r.Method+" "+p+": a request from another site or port (Sec-Fetch-Site: "+site+") is not the status page's own")
		return
	}
	sess, id, ok := s.uiSessionOf(r)
	if !ok {
		s.gate.refuseUnauth(w, r)
		if pattern == "GET /ui/{$}" {
			writeUIPage(w, http.StatusUnauthorized, signInNeededPage)
			return
		}
		writeError(w, http.StatusUnauthorized, CodeSessionRequired, "no status page session: sign in with the link `syncd ui` opens (an Authorization header does not make a session)")
		return
	}
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead
	if !hasOrigin && (!safe || websocket.IsWebSocketUpgrade(r)) {
		refuse(http.StatusForbidden, CodeForbiddenOrigin, r.Method+" "+p+" needs the Origin header of the status page ("+quoteHeader(own)+")")
		return
	}
	if !safe && !sess.csrfOK(r.Header.Get(HeaderCSRFToken)) {
		refuse(http.StatusForbidden, CodeCSRFFailed, r.Method+" "+p+": missing or wrong "+HeaderCSRFToken+" header (the csrf_token of GET /ui/session)")
		return
	}
	s.gate.authenticated(r)
	if strings.HasPrefix(p, uiAPIPrefix+"/") {
		s.dispatch(w, withUISession(uiAPIRequest(r), id, sess), apiMux, nil)
		return
	}
	if pattern == "" {
		s.unrouted(w, r, s.uiMux)
		return
	}
	s.uiMux.ServeHTTP(w, withUISession(r, id, sess))
}

// uiAPIRequest is r addressed to the API route under /ui/api.
func uiAPIRequest(r *http.Request) *http.Request {
	r2 := r.Clone(r.Context())
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, uiAPIPrefix)
	if r.URL.RawPath != "" {
		r2.URL.RawPath = strings.TrimPrefix(r.URL.RawPath, uiAPIPrefix)
	}
	// The page's requests are the admin's: a bearer token or ?token=
	// they may carry is not what let them in.
	r2.Header.Del("Authorization")
	return r2
}

// uiSessionOf returns the live session of r's cookie. Any syncd_ui
// cookie of the request may hold it: a server on another port of the
// same host may set cookies the page then sends (cookies are not kept
// apart by port), and ones set with longer paths come first; they must
// not sign the page out. The header's size (MaxHeaderBytes) bounds the
// number looked at.
func (s *Server) uiSessionOf(r *http.Request) (uiSession, string, bool) {
	for _, c := range r.CookiesNamed(UICookieName) {
		if sess, ok := s.ui.session(c.Value); ok {
			return sess, c.Value, true
		}
	}
	return uiSession{}, "", false
}

// uiSessionKey is the request context key of the page's session.
type uiSessionKey struct{}

type uiSessionCtx struct {
	id   string
	sess uiSession
}

func withUISession(r *http.Request, id string, sess uiSession) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), uiSessionKey{}, uiSessionCtx{id, sess}))
}

func uiSessionFrom(r *http.Request) uiSessionCtx {
	c, _ := r.Context().Value(uiSessionKey{}).(uiSessionCtx)
	return c
}

// uiStreamEnd returns, for an event stream the page opened through
// /ui/api, a channel closed when its session ends: signed out, ended
// by a newer sign-in past MaxUISessions, or expired (then the stream
// gets CloseSessionEnded). The watch ends with stop, which the handler
// calls when it returns. Nil for any other stream.
func (s *Server) uiStreamEnd(r *http.Request) (end <-chan struct{}, stop func()) {
	c := uiSessionFrom(r)
	if c.sess.ended == nil {
		return nil, func() {}
	}
	ch := make(chan struct{})
	done := make(chan struct{})
	t := time.NewTimer(max(0, c.sess.expires.Sub(s.ui.now())))
	go func() {
		defer t.Stop()
		select {
		case <-c.sess.ended:
		case <-t.C:
		case <-done:
			return
		}
		close(ch)
	}()
	return ch, func() { close(done) }
}

// isLoopbackHost reports whether a Host header names the loopback
// interface: localhost, 127.0.0.0/8 or ::1, with or without a port.
func isLoopbackHost(hostport string) bool {
	host := normalizeHost(hostport)
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// writeUIPage writes one of the page's HTML answers under its CSP.
func writeUIPage(w http.ResponseWriter, status int, body []byte) {
	writeUIFile(w, status, uiAsset{body: body, ctype: "text/html; charset=utf-8"})
}

func writeUIFile(w http.ResponseWriter, status int, a uiAsset) {
	h := w.Header()
	h.Set("Content-Security-Policy", uiCSP)
	// The sign-in code must not leave in a Referer.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Type", a.ctype)
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(status)
	_, _ = w.Write(a.body)
}

// The static pages of a refused sign-in: no script, no data.
var (
	signInNeededPage = []byte(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>syncd: sign in</title></head>
<body><main><h1>Sign in to syncd's status page</h1>
<p>This browser has no session for this page, or its session ended (sessions last 12 hours, and end when syncd restarts).</p>
<p>Run <code>syncd ui</code> on this machine: it opens a one-time sign-in link. (<code>syncd ui --no-open</code> prints the link instead.)</p>
</main></body></html>
`)
	signInFailedPage = []byte(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>syncd: sign-in link not valid</title></head>
<body><main><h1>This sign-in link does not work</h1>
<p>A sign-in link works once, within a minute of being made; this one was used already, has expired, or is unknown to this syncd (which may have restarted).</p>
<p>Run <code>syncd ui</code> again for a new link.</p>
</main></body></html>
`)
)

// GET /ui/login?code=C: a valid code (known, unused, not expired) sets
// the session cookie and answers 303 to /ui/; any other, 403 and a page
// saying to run syncd ui again. The code is used up either way.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		// A HEAD (a link checker's) must not use the code up.
		s.gate.refuseUnauth(w, r)
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed on /ui/login (allowed: GET)")
		return
	}
	id, sess, ok, err := s.ui.redeem(r.URL.Query().Get("code"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		s.gate.refuseUnauth(w, r)
		writeUIPage(w, http.StatusForbidden, signInFailedPage)
		return
	}
	s.gate.authenticated(r)
	s.logger.Info("localapi: status page signed in", "expires", sess.expires.UTC().Format(time.RFC3339))
	http.SetCookie(w, &http.Cookie{
		Name:     UICookieName,
		Value:    id,
		Path:     uiCookiePath,
		MaxAge:   int(UISessionLifetime / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Location", "/ui/")
	w.WriteHeader(http.StatusSeeOther)
}

// GET /ui/ → the page.
func (s *Server) uiIndex(w http.ResponseWriter, r *http.Request) {
	a, ok := uiAssets["index.html"]
	if !ok {
		writeError(w, http.StatusNotFound, CodeNotFound, "this build has no status page")
		return
	}
	writeUIFile(w, http.StatusOK, a)
}

// GET /ui/assets/{file} → one of the page's files.
func (s *Server) uiAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	a, ok := uiAssets[name]
	if !ok || !fs.ValidPath(name) {
		writeError(w, http.StatusNotFound, CodeNotFound, "no file "+strconv.Quote(name)+" in the status page")
		return
	}
	writeUIFile(w, http.StatusOK, a)
}

// uiSessionAnswer is the answer to GET /ui/session.
type uiSessionAnswer struct {
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
	EventsURL string    `json:"events_url"`
}

// GET /ui/session → {csrf_token, expires_at, events_url}.
func (s *Server) uiSessionInfo(w http.ResponseWriter, r *http.Request) {
	c := uiSessionFrom(r)
	writeJSON(w, http.StatusOK, uiSessionAnswer{CSRFToken: c.sess.csrf, ExpiresAt: c.sess.expires.UTC(), EventsURL: uiEventsURL})
}

// POST /ui/logout → 204, the session ended and its cookie cleared.
func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request) {
	s.ui.end(uiSessionFrom(r).id)
	s.logger.Info("localapi: status page signed out")
	http.SetCookie(w, &http.Cookie{Name: UICookieName, Value: "", Path: uiCookiePath, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// uiLinkAnswer is the answer to POST /v1/ui/links.
type uiLinkAnswer struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// POST /v1/ui/links (admin) → 201 {url, expires_at}: a sign-in link
// for the page on the loopback TCP listener, valid once for
// UILinkLifetime.
func (s *Server) uiLinks(w http.ResponseWriter, r *http.Request) {
	_, err := query(r)
	if err == nil {
		err = requireNoBody(r)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	addr, err := s.uiAddrFor(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	code, expires, err := s.ui.newCode()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, uiLinkAnswer{URL: "http://" + addr + "/ui/login?code=" + code, ExpiresAt: expires.UTC()})
}

// uiAddrFor is the host:port a browser on this machine reaches the page
// at: the loopback TCP listener Run serves (a wildcard address is
// reached on loopback). Served without Run (a test's server), it is the
// request's Host when that is a loopback name.
func (s *Server) uiAddrFor(r *http.Request) (string, error) {
	s.runMu.Lock()
	tcp := s.tcpAddr
	s.runMu.Unlock()
	if tcp == nil {
		if !fromUnixSocket(r) && isLoopbackHost(r.Host) {
			return r.Host, nil
		}
		return "", &apiError{http.StatusConflict, CodeUIUnreachable, "syncd serves no loopback TCP listener, and a browser cannot reach the Unix socket: the status page needs listen set to a loopback address"}
	}
	ip := tcp.IP
	switch {
	case ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	case !ip.IsLoopback():
		return "", &apiError{http.StatusConflict, CodeUIUnreachable, "syncd listens on " + tcp.String() + ", not a loopback address; the status page is served on loopback only"}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port)), nil
}
