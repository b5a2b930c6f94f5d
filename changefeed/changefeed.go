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
//   - deleted records stay as tombstones for a window; the highest
//     position of a tombstone swept is the actor's horizon;
//   - one read returns its rows, the actor's head (its latest position)
//     and its horizon from ONE snapshot (a bbolt View, a REPEATABLE READ
//     transaction, one statement).
//
// The handler owns the cursor rules: a cursor that needs a swept
// tombstone (below the horizon) or that the actor's sequence has not
// reached (another database) is answered 410 cursor_expired, and the
// client reads everything again; the last page of a read ends at the
// head it was read with, a cursor the server accepts.
//
// Mount it with Handler:
//
//	feed := changefeed.Handler(changefeed.Config{
//		Source:   mySource,  // Changes(ctx, actor, after, limit) (Read, error)
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
	"strings"
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
	// Progress is how far the page's cursor is through the actor's
	// feed; absent from servers that do not say. A client reads it as
	// a progress bar's fraction, nothing more.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is where a page ends in the actor's sequence of positions: At
// (the cursor's position) of Of (the actor's head when the page was
// read). At/Of is the share read; it counts positions, not records (a
// record changed ten times holds one place in the feed and ten
// positions), so it is an estimate that reaches 1 at the last page, and
// Of grows while the actor writes.
type Progress struct {
	At int64 `json:"at"`
	Of int64 `json:"of"`
}

// ErrCursorExpired may be returned by a Source that knows a read cannot
// be served (the handler answers 410 cursor_expired). The reference
// Sources leave the decision to the handler: they report Head and
// Horizon.
var ErrCursorExpired = errors.New("changefeed: cursor expired")

// Source reads an actor's changes.
type Source interface {
	// Changes returns, from ONE snapshot of the actor's records, up to
	// limit records whose position is above after (0: from the
	// beginning), in position order, each with its position; whether
	// more follow; and the actor's head and horizon in that snapshot.
	// The rows and the head must agree: when More is false, the page
	// holds every record whose latest position is in (after, Head].
	Changes(ctx context.Context, actor string, after int64, limit int) (Read, error)
}

// Read is what one Source.Changes read.
type Read struct {
	Changes   []Change
	Positions []int64 // Positions[i] is the position of Changes[i]
	More      bool    // records above the last position follow
	// Head is the actor's latest position (0: it never wrote): every
	// write at or below it is committed and in the snapshot.
	Head int64
	// Horizon is the highest position of the actor's swept tombstones
	// (0: none swept).
	Horizon int64
}

// Cursor is where a client is in an actor's feed. Clients hold it as an
// opaque string (EncodeCursor, ParseCursor).
type Cursor struct {
	// Set is false for no cursor: the beginning, a new device's first
	// read. It never expires.
	Set bool
	// Pos: the client holds every change up to this position. 0 is a
	// position like any other (the head of an actor that never wrote).
	Pos int64
	// Floor is set on the pages of a read from the beginning that have
	// more after them: the head when the read began. Tombstones at or
	// below it were deleted before the read began, so the read never
	// held their records and their sweep does not expire it. Otherwise
	// 0: Pos decides.
	Floor int64
}

// expired reports whether c needs what a read at head and horizon no
// longer keeps: a tombstone swept above what c already read, or a
// position the actor's sequence has not reached (a cursor of another
// database).
func (c Cursor) expired(head, horizon int64) bool {
	return c.Set && (c.Pos > head || c.Floor > head || max(c.Pos, c.Floor) < horizon)
}

// next is the cursor after the page r read at c: the last position of
// the page while more follow (a read from the beginning keeps its
// starting head as the floor), and the head when none do, so the last
// page of every read ends at the head, at or past the horizon.
func (c Cursor) next(r Read) Cursor {
	last := int64(0)
	if n := len(r.Positions); n > 0 {
		last = r.Positions[n-1]
	}
	if !r.More {
		return Cursor{Set: true, Pos: max(r.Head, last, c.Pos)}
	}
	floor := c.Floor
	if !c.Set {
		floor = r.Head
	}
	if floor <= last {
		floor = 0
	}
	return Cursor{Set: true, Pos: last, Floor: floor}
}

// EncodeCursor turns a cursor into the string clients hold: "" for no
// cursor, the position ("42"), or the position and the floor ("42.97").
func EncodeCursor(c Cursor) string {
	switch {
	case !c.Set:
		return ""
	case c.Floor > c.Pos:
		return strconv.FormatInt(c.Pos, 10) + "." + strconv.FormatInt(c.Floor, 10)
	default:
		return strconv.FormatInt(c.Pos, 10)
	}
}

// ParseCursor reads a cursor EncodeCursor made; "" is no cursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	bad := errors.New("changefeed: not a cursor of this server")
	pos, floor, hasFloor := strings.Cut(s, ".")
	c := Cursor{Set: true}
	var err error
	if c.Pos, err = parsePosition(pos); err != nil {
		return Cursor{}, bad
	}
	if hasFloor {
		if c.Floor, err = parsePosition(floor); err != nil || c.Floor <= c.Pos {
			return Cursor{}, bad
		}
	}
	if EncodeCursor(c) != s { // one spelling per cursor: no "007"
		return Cursor{}, bad
	}
	return c, nil
}

func parsePosition(s string) (int64, error) {
	n, err := strconv.ParseUint(s, 10, 63)
	return int64(n), err
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
// A page with more after it ends at its last position; the last page
// (an empty one too) ends at the head the Source read, so a client that
// read to the end holds a cursor the server accepts.
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
			read, err := cfg.Source.Changes(r.Context(), actor, after.Pos, limit)
			if err == nil && (len(read.Positions) != len(read.Changes) || read.More && len(read.Changes) == 0) {
				err = errors.New("changefeed: the source's read is inconsistent")
			}
			switch {
			case errors.Is(err, ErrCursorExpired), err == nil && after.expired(read.Head, read.Horizon):
				writeErr(w, r, http.StatusGone, CodeCursorExpired, "the server no longer keeps what this cursor needs; read again from the beginning")
				return
			case err != nil:
				if r.Context().Err() != nil {
					return
				}
				writeErr(w, r, http.StatusInternalServerError, CodeInternal, "reading the changes failed; retry later")
				return
			}
			if len(read.Changes) > 0 || deadline == nil {
				next := after.next(read)
				page := Page{Changes: read.Changes, Cursor: EncodeCursor(next), HasMore: read.More,
					Progress: &Progress{At: min(next.Pos, read.Head), Of: read.Head}}
				if page.Changes == nil {
					page.Changes = []Change{}
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
