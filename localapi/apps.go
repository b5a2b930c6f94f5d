package localapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
)

// App tokens.
//
// The admin token (the data directory's api-token file) opens every
// route. An app token, made by POST /v1/apps with the admin token, opens
// the entity routes, the operations, the events and the status, scoped
// to the entity types it was granted, and read-only if asked. The daemon
// keeps only each token's SHA-256 (queue.App.TokenDigest): the token is
// shown once, in the answer that made it. Removing the app revokes it:
// the next request with it is refused and its event streams are closed
// (CloseRevoked).

// appTokenPrefix starts every app token, so that people, logs and secret
// scanners can tell one from the admin token.
const appTokenPrefix = "syncd_app_"

// scope is what a route needs from the caller's token. The zero value
// is the admin's: a route registered without a scope is closed to apps.
type scope int

const (
	scopeAdmin scope = iota // the admin token only
	scopeRead               // any token; an app's answer is filtered to its types
	scopeWrite              // any token that is not read-only
)

func (sc scope) String() string {
	switch sc {
	case scopeWrite:
		return "write"
	case scopeAdmin:
		return "admin"
	}
	return "read"
}

// grant is what an app token allows. A request made with the admin token
// has no grant (nil).
type grant struct {
	name     string
	types    map[string]bool
	typeList []string // sorted
	readOnly bool
	// revoked is closed when the app is removed: its event streams end.
	revoked chan struct{}
	// mu is held for reading by each write made with the grant, from
	// its last check to its commit, and for writing by the revocation:
	// once DELETE /v1/apps/{name} has answered, no write of the app can
	// still commit (one authorised earlier, whose body came slowly,
	// included).
	mu   sync.RWMutex
	gone bool
}

// errRevoked answers a request whose app was removed while it ran.
var errRevoked = &apiError{http.StatusUnauthorized, CodeUnauthorized, "this app's token was revoked"}

// commit runs fn, a write made with grant g (nil: the admin token),
// unless g was revoked meanwhile; the revocation waits for it.
func (g *grant) commit(fn func() error) error {
	if g == nil {
		return fn()
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.gone {
		return errRevoked
	}
	return fn()
}

// revoke ends the grant: its streams are told, and the writes that
// hold it are waited for.
func (g *grant) revoke() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.gone {
		g.gone = true
		close(g.revoked)
	}
}

func newGrant(a queue.App) *grant {
	g := &grant{name: a.Name, types: make(map[string]bool, len(a.Types)), typeList: slices.Sorted(slices.Values(a.Types)), readOnly: a.ReadOnly, revoked: make(chan struct{})}
	for _, t := range a.Types {
		g.types[t] = true
	}
	return g
}

// appName is the name recorded on the operations a request makes: the
// app's, or none for the admin token.
func (g *grant) appName() string {
	if g == nil {
		return ""
	}
	return g.name
}

// mayUse reports whether the caller may use entity type t.
func (g *grant) mayUse(t string) bool { return g == nil || g.types[t] }

// grantKey is the request context key of the caller's *grant.
type grantKey struct{}

// callerOf returns the grant of the request's token; nil for the admin
// token.
func callerOf(r *http.Request) *grant {
	g, _ := r.Context().Value(grantKey{}).(*grant)
	return g
}

func withGrant(r *http.Request, g *grant) *http.Request {
	if g == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), grantKey{}, g))
}

// appTable holds the registered apps by token digest. It is loaded from
// the store at New and kept in step by the app routes, which are the
// only writers of the store's apps: a request finds its grant without
// touching the data file.
type appTable struct {
	// manage serialises the app routes' store write and table change, so
	// the table never disagrees with the store (an add and a remove of
	// one name racing could otherwise leave a grant no one can revoke).
	manage   sync.Mutex
	mu       sync.RWMutex
	byDigest map[[32]byte]*grant
	digests  map[string][32]byte // name → digest
}

func (t *appTable) load(apps []queue.App) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byDigest, t.digests = make(map[[32]byte]*grant), make(map[string][32]byte)
	for _, a := range apps {
		if err := t.addLocked(a); err != nil {
			return err
		}
	}
	return nil
}

func (t *appTable) addLocked(a queue.App) error {
	var d [32]byte
	if b, err := hex.DecodeString(a.TokenDigest); err != nil || len(b) != len(d) {
		return fmt.Errorf("localapi: app %q has a malformed token digest", a.Name)
	} else {
		copy(d[:], b)
	}
	t.byDigest[d] = newGrant(a)
	t.digests[a.Name] = d
	return nil
}

func (t *appTable) add(a queue.App) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addLocked(a)
}

// remove forgets an app, then revokes its grant: new requests find no
// grant, and the writes in flight with it are waited for.
func (t *appTable) remove(name string) {
	t.mu.Lock()
	d, ok := t.digests[name]
	g := t.byDigest[d]
	if ok {
		delete(t.byDigest, d)
		delete(t.digests, name)
	}
	t.mu.Unlock()
	if g != nil {
		g.revoke()
	}
}

// lookup returns the grant of a token's digest.
func (t *appTable) lookup(digest [32]byte) (*grant, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	g, ok := t.byDigest[digest]
	return g, ok
}

// appAnswer is an app as the API shows it. Token is set once, in the
// answer to the POST that made it.
type appAnswer struct {
	Name      string    `json:"name"`
	Types     []string  `json:"types"`
	ReadOnly  bool      `json:"readOnly"`
	CreatedAt time.Time `json:"createdAt"`
	Token     string    `json:"token,omitempty"`
}

func appAnswerOf(a queue.App) appAnswer {
	return appAnswer{Name: a.Name, Types: a.Types, ReadOnly: a.ReadOnly, CreatedAt: a.CreatedAt}
}

// newAppToken makes an app token: the prefix and 32 random bytes as hex.
func newAppToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("localapi: make app token: %w", err)
	}
	return appTokenPrefix + hex.EncodeToString(b), nil
}

// POST /v1/apps {name, types, readOnly?} → 201 app + token (admin).
func (s *Server) addApp(w http.ResponseWriter, r *http.Request) {
	var a queue.App
	_, err := s.parseWrite(r,
		&field{name: "name", dst: &a.Name, required: true},
		&field{name: "types", dst: &a.Types, required: true},
		&field{name: "readOnly", dst: &a.ReadOnly})
	if err == nil {
		_, err = query(r)
	}
	if err == nil {
		for _, t := range a.Types {
			if s.types != nil && !s.types[t] {
				err = badRequest(CodeInvalidRequest, fmt.Sprintf("entity type %q is not configured (entityTypes)", t))
				break
			}
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	token, err := newAppToken()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := tokenDigest(token)
	a.TokenDigest = hex.EncodeToString(d[:])
	s.apps.manage.Lock()
	defer s.apps.manage.Unlock()
	a, err = s.store.AddApp(r.Context(), a)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.apps.add(a); err != nil {
		s.fail(w, r, err)
		return
	}
	s.logger.Info("localapi: app added", "app", a.Name, "types", a.Types, "readOnly", a.ReadOnly)
	ans := appAnswerOf(a)
	ans.Token = token
	writeJSON(w, http.StatusCreated, ans)
}

// GET /v1/apps → 200 {items, next} (admin). Tokens are not kept, so not
// shown.
func (s *Server) listApps(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		s.fail(w, r, err)
		return
	}
	apps, err := s.store.Apps()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ans := listAnswer[appAnswer]{Items: make([]appAnswer, len(apps))}
	for i, a := range apps {
		ans.Items[i] = appAnswerOf(a)
	}
	writeJSON(w, http.StatusOK, ans)
}

// removeAnswer is the answer to DELETE /v1/apps/{name}.
type removeAnswer struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
}

// DELETE /v1/apps/{name} → 200 {name, removed} (admin). The app's token
// is refused from the next request on, and its event streams are closed
// with CloseRevoked.
func (s *Server) removeApp(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := queue.ValidateAppName(name); err != nil {
		s.fail(w, r, badRequest(CodeInvalidRequest, fmt.Sprintf("app name in the path must be 1 to %d letters, digits, '_', '-' or '.'", queue.MaxAppNameLen)))
		return
	}
	if _, err := query(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := requireNoBody(r); err != nil {
		s.fail(w, r, err)
		return
	}
	s.apps.manage.Lock()
	defer s.apps.manage.Unlock()
	if err := s.store.RemoveApp(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	s.apps.remove(name)
	s.logger.Info("localapi: app removed; its token is revoked", "app", name)
	writeJSON(w, http.StatusOK, removeAnswer{Name: name, Removed: true})
}
