package localapi

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

// Limits and lifetimes of the status page's sign-in (docs/ui.md).
const (
	// UILinkLifetime is how long a sign-in link (POST /v1/ui/links) may
	// be opened. It works once.
	UILinkLifetime = 60 * time.Second
	// MaxUILinks bounds the sign-in links made and not yet used or
	// expired; past it POST /v1/ui/links answers 429 too_many_links
	// until one is used or expires (within UILinkLifetime).
	MaxUILinks = 16
	// UISessionLifetime is how long a session of the page lasts from its
	// sign-in: the cookie's Max-Age. It is not extended by use; a daemon
	// restart ends every session sooner (they live in memory only).
	UISessionLifetime = 12 * time.Hour
	// MaxUISessions bounds the sessions kept; a sign-in past it ends the
	// session that would expire first.
	MaxUISessions = 32
	// uiSecretBytes is the entropy of a code, a session id and a CSRF
	// token: 256 bits.
	uiSecretBytes = 32
)

// errTooManyLinks: MaxUILinks links are outstanding.
var errTooManyLinks = errors.New("localapi: too many sign-in links outstanding")

// uiSession is a signed-in page.
type uiSession struct {
	csrf    string
	expires time.Time
	// ended is closed when the session ends before it expires: a
	// sign-out, or a newer sign-in past MaxUISessions. The page's event
	// streams close with it.
	ended chan struct{}
}

// uiAuth keeps the sign-in codes and the sessions of the status page, in
// memory. Both are kept by the SHA-256 digest of their secret, as app
// tokens are: a map lookup's timing can tell at most something about a
// digest. Time comes from now (Config.Now), so that tests expire codes
// and sessions without waiting.
type uiAuth struct {
	now func() time.Time

	mu       sync.Mutex
	codes    map[[32]byte]time.Time // digest of the code → its expiry
	sessions map[[32]byte]uiSession // digest of the session id → session
}

func newUIAuth(now func() time.Time) *uiAuth {
	return &uiAuth{now: now, codes: make(map[[32]byte]time.Time), sessions: make(map[[32]byte]uiSession)}
}

// newSecret returns 256 random bits, base64url without padding (43
// characters: safe in a URL path, a query and a cookie).
func newSecret() (string, error) {
	var b [uiSecretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// newCode makes a sign-in code valid once until expires.
func (a *uiAuth) newCode() (code string, expires time.Time, err error) {
	code, err = newSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, exp := range a.codes {
		if !now.Before(exp) {
			delete(a.codes, k)
		}
	}
	if len(a.codes) >= MaxUILinks {
		return "", time.Time{}, errTooManyLinks
	}
	expires = now.Add(UILinkLifetime)
	a.codes[tokenDigest(code)] = expires
	return code, expires, nil
}

// redeem uses code up, whether or not it is still valid, and when it
// was (known, unused, not expired) starts a session: its id and the
// session. A full table ends the session that expires first.
func (a *uiAuth) redeem(code string) (id string, s uiSession, ok bool, err error) {
	if code == "" {
		return "", s, false, nil
	}
	now := a.now()
	a.mu.Lock()
	k := tokenDigest(code)
	exp, known := a.codes[k]
	delete(a.codes, k)
	a.mu.Unlock()
	if !known || !now.Before(exp) {
		return "", s, false, nil
	}
	if id, err = newSecret(); err != nil {
		return "", s, false, err
	}
	if s.csrf, err = newSecret(); err != nil {
		return "", s, false, err
	}
	s.expires = now.Add(UISessionLifetime)
	s.ended = make(chan struct{})
	a.mu.Lock()
	defer a.mu.Unlock()
	var first [32]byte
	var firstExp time.Time
	for k, o := range a.sessions {
		if !now.Before(o.expires) {
			a.dropLocked(k)
		} else if firstExp.IsZero() || o.expires.Before(firstExp) {
			first, firstExp = k, o.expires
		}
	}
	if len(a.sessions) >= MaxUISessions {
		a.dropLocked(first)
	}
	a.sessions[tokenDigest(id)] = s
	return id, s, true, nil
}

// session returns the live session of id.
func (a *uiAuth) session(id string) (uiSession, bool) {
	if id == "" {
		return uiSession{}, false
	}
	k := tokenDigest(id)
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[k]
	if ok && !now.Before(s.expires) {
		a.dropLocked(k)
		return uiSession{}, false
	}
	return s, ok
}

// end ends the session of id.
func (a *uiAuth) end(id string) {
	a.mu.Lock()
	a.dropLocked(tokenDigest(id))
	a.mu.Unlock()
}

// dropLocked forgets a session and closes its ended channel.
func (a *uiAuth) dropLocked(k [32]byte) {
	if s, ok := a.sessions[k]; ok {
		delete(a.sessions, k)
		close(s.ended)
	}
}

// csrfOK compares a request's CSRF token with the session's in constant
// time (digests of equal length, as the admin token is compared).
func (s uiSession) csrfOK(token string) bool {
	if token == "" {
		return false
	}
	got, want := tokenDigest(token), tokenDigest(s.csrf)
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
