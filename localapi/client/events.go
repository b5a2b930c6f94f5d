package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Event is one sync-state event. Seq only grows, across restarts too.
type Event struct {
	Seq         uint64    `json:"seq"`
	Time        time.Time `json:"time"`
	Type        string    `json:"type"`
	AccountID   string    `json:"accountId,omitempty"`
	EntityType  string    `json:"entityType,omitempty"`
	EntityID    string    `json:"entityId,omitempty"`
	OperationID string    `json:"operationId,omitempty"`
	State       string    `json:"state,omitempty"`
	SyncState   string    `json:"syncState,omitempty"`
	ErrorCode   string    `json:"errorCode,omitempty"`
	// MergedInto: an update done unsent, superseded by this later
	// operation, which carries its data (mergeable types).
	MergedInto string          `json:"mergedInto,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	// App: operation.state, the app that made the operation.
	App string `json:"app,omitempty"`
	// BlockedBy: operation.state of an operation held by its ordered
	// group, the earlier member it waits for; the event of its release
	// has none.
	BlockedBy string `json:"blockedBy,omitempty"`
}

// EntityChange is the data of an entity event that carries some: where
// the change came from and which fields it touched (docs/events.md).
type EntityChange struct {
	// Origin is OriginRemote for a change pulled from the server, and
	// OriginAnswer for fields a merging server's answer to this device's
	// write brought in; empty for the app's own writes.
	Origin string `json:"origin,omitempty"`
	// Paths are the fields of the server's record merged into an entity
	// whose own edits wait (JSON pointers): those whose local value
	// changed.
	Paths []string `json:"paths,omitempty"`
	// ConflictPaths, on an entity.changed in state conflict field by
	// field, are the fields in conflict (Entity.Conflict has their
	// values).
	ConflictPaths []string `json:"conflictPaths,omitempty"`
}

// Origins of EntityChange.
const (
	OriginRemote = "remote"
	OriginAnswer = "answer"
)

// EntityChange decodes the data of an entity.changed or entity.removed
// event; the zero EntityChange when it carries none (or another shape).
func (e Event) EntityChange() EntityChange {
	var c EntityChange
	if len(e.Data) > 0 && json.Unmarshal(e.Data, &c) != nil {
		return EntityChange{}
	}
	return c
}

// EventResync tells the subscriber that events it asked for are no
// longer kept: re-read the state it shows, then carry on.
const EventResync = "resync"

// SubscribeOptions selects events.
type SubscribeOptions struct {
	// Since resumes after this seq; 0 starts from the oldest kept event.
	// To start from now, pass Status().LastEventSeq (read the state you
	// show first, then subscribe after that seq: nothing falls between).
	Since uint64
	// Types are event types or prefixes ending in "." ("entity.").
	Types []string
	// EntityType and AccountID, when set, select events of that entity
	// type or account only.
	EntityType string
	AccountID  string
	// MaxReconnectDelay bounds the wait between reconnection attempts
	// (jittered exponential from 100ms). Default 5s.
	MaxReconnectDelay time.Duration
}

// Subscription is a live event stream that survives disconnects: after a
// dropped connection it reconnects with since = the last seq it returned,
// so no event is lost or repeated.
type Subscription struct {
	c    *Client
	opts SubscribeOptions

	mu     sync.Mutex
	conn   *websocket.Conn
	closed bool
	last   uint64
	// Reconnects counts reconnections, for tests and diagnostics.
	reconnects int
}

// Subscribe opens an event stream. It connects at once, so a bad token
// or a refused Origin is reported here.
func (c *Client) Subscribe(ctx context.Context, o SubscribeOptions) (*Subscription, error) {
	if o.MaxReconnectDelay <= 0 {
		o.MaxReconnectDelay = 5 * time.Second
	}
	s := &Subscription{c: c, opts: o, last: o.Since}
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.conn = conn
	return s, nil
}

func (s *Subscription) dial(ctx context.Context) (*websocket.Conn, error) {
	q := url.Values{}
	s.mu.Lock()
	q.Set("since", strconv.FormatUint(s.last, 10))
	s.mu.Unlock()
	if len(s.opts.Types) > 0 {
		q.Set("type", strings.Join(s.opts.Types, ","))
	}
	if s.opts.EntityType != "" {
		q.Set("entityType", s.opts.EntityType)
	}
	if s.opts.AccountID != "" {
		q.Set("account", s.opts.AccountID)
	}
	u := "ws://" + s.c.addr + "/v1/events?" + q.Encode()
	h := http.Header{"Authorization": {"Bearer " + s.c.token}}
	conn, resp, err := s.c.dialer.DialContext(ctx, u, h)
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error.Code != "" {
				return nil, &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Index: -1}
			}
			return nil, &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: resp.Status, Index: -1}
		}
		return nil, fmt.Errorf("client: events: %w", err)
	}
	return conn, nil
}

// ErrSubscriptionClosed is returned by Next after Close.
var ErrSubscriptionClosed = errors.New("client: subscription closed")

// Next returns the next event, reconnecting as needed until ctx ends.
// Errors that a reconnect cannot fix (a refused token) are returned.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	delay := 100 * time.Millisecond
	for {
		s.mu.Lock()
		conn, closed := s.conn, s.closed
		s.mu.Unlock()
		if closed {
			return Event{}, ErrSubscriptionClosed
		}
		if conn == nil {
			c, err := s.dial(ctx)
			var apiErr *Error
			switch {
			case errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable:
				return Event{}, err
			case err != nil:
				d := time.Duration(rand.Int64N(int64(delay))) + delay/2
				delay = min(2*delay, s.opts.MaxReconnectDelay)
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return Event{}, ctx.Err()
				case <-t.C:
				}
				continue
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return Event{}, ErrSubscriptionClosed
			}
			s.conn = c
			s.reconnects++
			s.mu.Unlock()
			conn = c
		}
		e, err := s.read(ctx, conn)
		if err == nil {
			s.mu.Lock()
			if e.Type == EventResync || e.Seq > s.last {
				s.last = e.Seq
				s.mu.Unlock()
				return e, nil
			}
			s.mu.Unlock()
			continue // a repeat: never hand one out twice
		}
		// A gorilla connection is done after any read error (a deadline
		// set for ctx included): drop it; the next call reconnects after
		// the last seq returned.
		s.mu.Lock()
		if s.conn == conn {
			s.conn = nil
		}
		s.mu.Unlock()
		conn.Close()
		if ctx.Err() != nil {
			return Event{}, ctx.Err()
		}
	}
}

// read reads one event, giving up when ctx ends.
func (s *Subscription) read(ctx context.Context, conn *websocket.Conn) (Event, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	var e Event
	err := conn.ReadJSON(&e)
	return e, err
}

// LastSeq returns the seq of the last event Next returned.
func (s *Subscription) LastSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Reconnects returns how many times the subscription reconnected.
func (s *Subscription) Reconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconnects
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		err := s.conn.Close()
		s.conn = nil
		return err
	}
	return nil
}
