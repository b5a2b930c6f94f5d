package remote

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"strings"
)

type actorKey struct{}

// ActorFromContext returns the authenticated actor of a request served by
// the Server.
func ActorFromContext(ctx context.Context) (string, bool) {
	a, ok := ctx.Value(actorKey{}).(string)
	return a, ok && a != ""
}

// DevActor is the actor dev mode assigns to a token: the part before the
// first '.', so "alice.1" and "alice.2" (a refreshed token) are both
// alice.
func DevActor(token string) string {
	actor, _, _ := strings.Cut(token, ".")
	return actor
}

// authenticator maps bearer tokens to actors.
type authenticator struct {
	dev    bool
	tokens map[[32]byte]string // sha256(token) -> actor
}

func newAuthenticator(tokens map[string]string, dev bool) *authenticator {
	a := &authenticator{dev: dev, tokens: make(map[[32]byte]string, len(tokens))}
	for tok, actor := range tokens {
		if tok != "" && actor != "" {
			a.tokens[sha256.Sum256([]byte(tok))] = actor
		}
	}
	return a
}

// actor returns the actor for the request's bearer token. Tokens are
// looked up by their SHA-256, so the lookup's timing says nothing about
// how much of a token matched.
func (a *authenticator) actor(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", false
	}
	if actor, ok := a.tokens[sha256.Sum256([]byte(tok))]; ok {
		return actor, true
	}
	if a.dev {
		if actor := DevActor(tok); actor != "" {
			return actor, true
		}
	}
	return "", false
}

// wrap answers 401 for requests without a known token and puts the actor
// into the context of the others.
func (a *authenticator) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor, ok := a.actor(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="syncd"`)
			writeError(w, r, http.StatusUnauthorized, CodeUnauthorized, "a valid bearer token is required")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey{}, actor)))
	})
}

// ReadTokensFile reads a tokens file: one "TOKEN ACTOR" pair per line,
// separated by white space; blank lines and lines starting with '#' are
// skipped.
func ReadTokensFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("remote: tokens file: %w", err)
	}
	defer f.Close()
	tokens := make(map[string]string)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("remote: tokens file %s line %d: want \"TOKEN ACTOR\"", path, n)
		}
		tokens[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("remote: tokens file %s: %w", path, err)
	}
	return tokens, nil
}
