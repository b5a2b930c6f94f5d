// Package changefeed serves the changes feed syncd's daemon pulls
// (GET /v1/changes?after=&limit=&wait=), from any backend's own tables:
// the JSON types, the cursor, the long poll, and the waking of long
// polls when a change commits, in one process (Notifier) or across
// server replicas on PostgreSQL (Listener). The backend implements
// Source: one query that returns an actor's records changed after a
// position, in the order they changed.
//
// The contract a Source keeps (docs/server.md, "Serving the feed"):
//
//   - every write gives the record a position in its actor's sequence,
//     strictly growing in COMMIT order: a reader never sees position n+1
//     committed before n. On PostgreSQL a per-actor counter row updated
//     in the write's transaction does it (its row lock orders one actor's
//     writers until they commit); a global sequence does not;
//   - a page holds each record at most once, at its latest version;
//   - deleted records stay as tombstones for a window; a cursor from
//     before the oldest position the Source still keeps (the horizon)
//     is answered 410 cursor_expired, and the client reads everything
//     again.
//
// Mount it with Handler:
//
//	feed := changefeed.Handler(changefeed.Config{
//		Source:   mySource,  // Changes(ctx, actor, after, limit)
//		Notifier: notifier, // Notify(actor) after each commit
//		Actor:    actorOf,  // the authenticated actor of a request
//	})
//	mux.Handle("GET /v1/changes", feed)
package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits of a request.
const (
	DefaultLimit = 500
	MaxLimit     = 1000
	MaxWait      = 60 * time.Second
)

// Change is one record of the feed, at its latest version.
type Change struct {
	Type        string          `json:"type"`
	ID          string          `json:"id"`       // the server's id
	ClientID    string          `json:"clientId"` // the client's id
	Version     int64           `json:"version"`
	Deleted     bool            `json:"deleted,omitempty"`
	Data        json.RawMessage `json:"data,omitempty"` // absent when deleted
	UpdatedAt   time.Time       `json:"updatedAt"`
	OperationID string          `json:"operationId,omitempty"`
}

// Page is one answer of the feed.
type Page struct {
	Changes []Change `json:"changes"`
	Cursor  string   `json:"cursor"`
	HasMore bool     `json:"hasMore"`
}

// ErrCursorExpired is what a Source returns when after is below its
// horizon: what the cursor needs was swept.
var ErrCursorExpired = errors.New("changefeed: cursor expired")

// Source reads an actor's changes.
type Source interface {
	// Changes returns up to limit records of actor whose position is
	// above after (0: from the beginning), in position order, each with
	// its position, and whether more follow. It returns ErrCursorExpired
	// when after is not 0 and below what it still keeps, or above the
	// actor's latest position (a cursor of another database).
	Changes(ctx context.Context, actor string, after int64, limit int) (changes []Change, positions []int64, more bool, err error)
}

// EncodeCursor and ParseCursor turn a position into the opaque cursor
// clients hold, and back.
func EncodeCursor(pos int64) string { return strconv.FormatInt(pos, 10) }

// ParseCursor reads a cursor; the empty cursor is 0, the beginning.
func ParseCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(c, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("changefeed: not a cursor of this server")
	}
	return n, nil
}

// Notifier wakes the long polls of an actor when its changes commit. It
// is safe for concurrent use; the zero value is ready.
type Notifier struct {
	mu      sync.Mutex
	waiters map[string]chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func (n *Notifier) init() {
	n.once.Do(func() { n.closed = make(chan struct{}) })
}

// Wait returns a channel closed at the actor's next Notify (or at
// Close). Take it BEFORE reading the Source, so that a change committed
// between the read and the wait is not missed.
func (n *Notifier) Wait(actor string) <-chan struct{} {
	n.init()
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.closed:
		return n.closed
	default:
	}
	if n.waiters == nil {
		n.waiters = make(map[string]chan struct{})
	}
	ch, ok := n.waiters[actor]
	if !ok {
		ch = make(chan struct{})
		n.waiters[actor] = ch
	}
	return ch
}

// Notify wakes the long polls of actor. Call it after the change
// committed (bbolt: tx.OnCommit; PostgreSQL: a Listener does it for
// every replica).
func (n *Notifier) Notify(actor string) {
	n.mu.Lock()
	ch, ok := n.waiters[actor]
	delete(n.waiters, actor)
	n.mu.Unlock()
	if ok {
		close(ch)
	}
}

// NotifyAll wakes every long poll (after a Listener lost notifications).
func (n *Notifier) NotifyAll() {
	n.mu.Lock()
	ws := n.waiters
	n.waiters = nil
	n.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

func (n *Notifier) stopping() bool {
	n.init()
	select {
	case <-n.closed:
		return true
	default:
		return false
	}
}

// Close wakes every long poll and makes later waits return at once: the
// server is stopping.
func (n *Notifier) Close() {
	n.init()
	n.mu.Lock()
	select {
	case <-n.closed:
	default:
		close(n.closed)
	}
	n.mu.Unlock()
	n.NotifyAll()
}

// Config configures Handler.
type Config struct {
	Source   Source
	Notifier *Notifier
	// Actor returns the request's authenticated actor; an error answers
	// 401.
	Actor func(*http.Request) (string, error)
	// WriteError writes an error answer (default: {"error":{"code","message"}}).
	WriteError func(w http.ResponseWriter, r *http.Request, status int, code, message string)
}

// Error codes of the feed.
const (
	CodeInvalidCursor = "invalid_cursor" // 400: not a cursor of this server
	CodeCursorExpired = "cursor_expired" // 410: read everything again
	CodeInvalidQuery  = "validation"     // 400: limit or wait not a number
	CodeUnauthorized  = "unauthorized"   // 401
	CodeInternal      = "internal"       // 500
)

// Handler serves GET /v1/changes?after=&limit=&wait= from cfg.Source:
// limit defaults to DefaultLimit and is clamped to MaxLimit, wait (in
// seconds) is clamped to MaxWait; with nothing after the cursor it
// holds the request until a change of the actor commits or wait ends.
// An empty page keeps the cursor.
func Handler(cfg Config) http.Handler {
	writeErr := cfg.WriteError
	if writeErr == nil {
		writeErr = writeError
	}
	if cfg.Notifier == nil {
		cfg.Notifier = &Notifier{}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor, err := cfg.Actor(r)
		if err != nil || actor == "" {
			writeErr(w, r, http.StatusUnauthorized, CodeUnauthorized, "no authenticated actor")
			return
		}
		q := r.URL.Query()
		after, err := ParseCursor(q.Get("after"))
		if err != nil {
			writeErr(w, r, http.StatusBadRequest, CodeInvalidCursor, "after is not a cursor this server gave")
			return
		}
		limit, wait := DefaultLimit, time.Duration(0)
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				writeErr(w, r, http.StatusBadRequest, CodeInvalidQuery, "limit must be a positive whole number")
				return
			}
			limit = min(n, MaxLimit)
		}
		if v := q.Get("wait"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				writeErr(w, r, http.StatusBadRequest, CodeInvalidQuery, "wait must be a whole number of seconds")
				return
			}
			wait = min(time.Duration(n)*time.Second, MaxWait)
		}
		var deadline <-chan time.Time
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		for {
			woken := cfg.Notifier.Wait(actor) // before the read: no change is missed
			changes, positions, more, err := cfg.Source.Changes(r.Context(), actor, after, limit)
			switch {
			case errors.Is(err, ErrCursorExpired):
				writeErr(w, r, http.StatusGone, CodeCursorExpired, "the server no longer keeps what this cursor needs; read again from the beginning")
				return
			case err != nil:
				if r.Context().Err() != nil {
					return
				}
				writeErr(w, r, http.StatusInternalServerError, CodeInternal, "reading the changes failed; retry later")
				return
			}
			if len(changes) > 0 || deadline == nil {
				page := Page{Changes: changes, Cursor: EncodeCursor(after), HasMore: more}
				if page.Changes == nil {
					page.Changes = []Change{}
				}
				if len(positions) > 0 {
					page.Cursor = EncodeCursor(positions[len(positions)-1])
				}
				writeJSON(w, page)
				return
			}
			select {
			case <-woken:
				if cfg.Notifier.stopping() {
					deadline = nil // the server stops: answer what there is
				}
			case <-deadline:
				deadline = nil // one more read, then answer whatever it finds
			case <-r.Context().Done():
				return
			}
		}
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":{"code":"internal","message":"encoding failed"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
