// Package client is the Go client apps use to talk to syncd's local API:
// entity writes and reads, conflicts (whole or field by field) and their
// resolution, the versions the server keeps of a record, the operation
// queue, status, the session, and a live event subscription that
// resumes by itself after a reconnect. It reaches syncd over loopback TCP
// (Config.Addr) or, on Linux and macOS, over syncd's Unix socket
// (Config.Socket).
//
// It has no dependency on syncd's storage: an app links this package and
// gorilla/websocket, nothing else of syncd.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/syncd/syncd/internal/peercred"
)

// DefaultAddr is where syncd listens unless configured otherwise.
const DefaultAddr = "127.0.0.1:7419"

// Config configures a Client.
type Config struct {
	// Addr is syncd's host:port. Default DefaultAddr. Unused with
	// Socket.
	Addr string
	// Socket, when set, is the path of syncd's Unix socket (its socket
	// setting; by default syncd.sock in its data directory on Linux and
	// macOS): every request and the event stream go over it instead of
	// TCP, with Host "localhost". syncd serves the socket to processes
	// of its own user only, and still wants the token.
	Socket string
	// Token is the API token (the api-token file in syncd's data dir).
	Token string
	// HTTPClient. Default: a client with a 30s timeout that keeps up to
	// DefaultMaxIdleConns connections to syncd open for reuse, in a pool
	// that every Client made without an HTTPClient shares (one pool per
	// socket with Socket). With Socket, the Client uses a copy of
	// HTTPClient whose Transport, which must be nil or an
	// *http.Transport, is cloned to dial the socket: close its idle
	// connections with Client.CloseIdleConnections.
	HTTPClient *http.Client
}

// defaultTransport is the connection pool every Client with the default
// HTTP client shares: net/http's default transport with more idle
// connections kept, or that transport itself if an app replaced it with
// another kind.
var defaultTransport = sync.OnceValue(func() http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = DefaultMaxIdleConns
	return t
})

// DefaultMaxIdleConns is how many idle connections to syncd the default
// HTTP client keeps: an app writing from several goroutines at once
// reuses them instead of opening (and leaving in TIME_WAIT) a new
// loopback connection for most requests, as net/http's default of 2
// per host would.
const DefaultMaxIdleConns = 16

// socketTransports are the connection pools of the Clients made with a
// Socket and no HTTPClient, one per socket path.
var socketTransports sync.Map // path → *http.Transport

// socketTransport returns the shared pool of the socket at path.
func socketTransport(path string) http.RoundTripper {
	if t, ok := socketTransports.Load(path); ok {
		return t.(*http.Transport)
	}
	t, _ := socketTransports.LoadOrStore(path, dialingSocket(newDefaultTransport(), path))
	return t.(*http.Transport)
}

// newDefaultTransport is net/http's default transport, cloned, keeping
// DefaultMaxIdleConns idle connections (a bare one if an app replaced
// http.DefaultTransport with another kind).
func newDefaultTransport() *http.Transport {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		t = &http.Transport{}
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = DefaultMaxIdleConns
	return t
}

// dialingSocket makes t (modified in place) dial the Unix socket at
// path for every request, with no proxy.
func dialingSocket(t *http.Transport, path string) *http.Transport {
	t.Proxy = nil
	t.DialTLSContext = nil
	t.DialContext = socketDialer(path)
	return t
}

// socketDialer dials the Unix socket at path whatever the address, and
// refuses a socket another user's process listens on: it would receive
// the token (a process that took the path while syncd was stopped).
func socketDialer(path string) func(ctx context.Context, _, _ string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil || !peercred.Supported {
			return c, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		uid, pid, err := peercred.Get(uc)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: socket %s: who listens on it: %w", path, err)
		}
		if uid != os.Geteuid() {
			c.Close()
			return nil, fmt.Errorf("%w: %s is served by user id %d (pid %d), not this user (%d); not sending the token there", ErrForeignSocket, path, uid, pid, os.Geteuid())
		}
		return c, nil
	}
}

// ErrForeignSocket is returned when the socket of Config.Socket is served
// by a process of another user than the client's.
var ErrForeignSocket = errors.New("client: the socket belongs to another user")

// Client talks to one syncd. It is safe for concurrent use.
type Client struct {
	base   string
	addr   string
	token  string
	hc     *http.Client
	dialer *websocket.Dialer // the event stream's
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.Token == "" {
		return nil, errors.New("client: no API token")
	}
	if cfg.Socket != "" {
		return newSocketClient(cfg)
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: defaultTransport()}
	}
	return &Client{base: "http://" + cfg.Addr, addr: cfg.Addr, token: cfg.Token, hc: cfg.HTTPClient, dialer: websocket.DefaultDialer}, nil
}

// socketHost is the Host of the requests over a Unix socket.
const socketHost = "localhost"

// newSocketClient is New for a Config with a Socket.
func newSocketClient(cfg Config) (*Client, error) {
	var hc *http.Client
	if cfg.HTTPClient == nil {
		hc = &http.Client{Timeout: 30 * time.Second, Transport: socketTransport(cfg.Socket)}
	} else {
		c := *cfg.HTTPClient
		switch t := c.Transport.(type) {
		case nil:
			c.Transport = dialingSocket(newDefaultTransport(), cfg.Socket)
		case *http.Transport:
			c.Transport = dialingSocket(t.Clone(), cfg.Socket)
		default:
			return nil, fmt.Errorf("client: Config.Socket: HTTPClient.Transport is a %T; give an *http.Transport, or none, for the client to dial the socket", t)
		}
		hc = &c
	}
	dialer := *websocket.DefaultDialer
	dialer.Proxy = nil
	dialer.NetDialContext = socketDialer(cfg.Socket)
	return &Client{base: "http://" + socketHost, addr: socketHost, token: cfg.Token, hc: hc, dialer: &dialer}, nil
}

// CloseIdleConnections closes the idle kept-alive connections of the
// client's HTTP client (with the default one: of every such Client), as
// an app does when it is done talking to syncd.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// ReadToken reads the API token from syncd's data directory.
func ReadToken(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "api-token"))
	if err != nil {
		return "", fmt.Errorf("client: read API token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Error is an error answer of the local API. Code is stable: switch on it.
type Error struct {
	Status  int
	Code    string
	Message string
	// Index is the refused write of a Batch (-1 otherwise).
	Index int
}

func (e *Error) Error() string {
	return fmt.Sprintf("syncd: %s (%d %s)", e.Message, e.Status, e.Code)
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Entity is an app record as syncd holds it.
type Entity struct {
	AccountID string          `json:"accountId"`
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Data      json.RawMessage `json:"data"`
	Deleted   bool            `json:"deleted,omitempty"`
	SyncState string          `json:"syncState"` // pending, synced, failed, conflict or stale
	ServerID  string          `json:"serverId,omitempty"`
	SyncError string          `json:"syncError,omitempty"`
	// SyncCode is the stable code of SyncError: the failed operation's
	// code (failed, conflict), or why the entity is stale (too_large,
	// refresh_needed).
	SyncCode        string    `json:"syncCode,omitempty"`
	Version         int64     `json:"version"`
	CreatedAt       time.Time `json:"createdAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
	LastOperationID string    `json:"lastOperationId"`
	// SyncedOperationID is the operation whose data the server was last
	// known to hold; empty when that is not known.
	SyncedOperationID string `json:"syncedOperationId,omitempty"`
	// ServerVersion is the server's version the local data is based on
	// (0: the server never had it, as far as syncd knows).
	ServerVersion int64 `json:"serverVersion,omitempty"`
	// Server is the server's record when it is newer and not taken
	// locally: in a conflict (SyncState "conflict"), or pulled while
	// local changes were unsent.
	Server *ServerRecord `json:"server,omitempty"`
	// Conflict is set in state conflict when the server named the
	// fields in conflict (a merging server): only the fields both sides
	// changed, each with its base, local and server value. Nil: the
	// conflict is of the whole record (see Server).
	Conflict *Conflict `json:"conflict,omitempty"`
	// Blocked: the entity's next operation waits for an earlier member
	// of its ordered group, BlockedBy (as Operation.BlockedBy).
	Blocked   bool   `json:"blocked,omitempty"`
	BlockedBy string `json:"blockedBy,omitempty"`
	// OperationID is the operation a write made (write answers only).
	OperationID string `json:"operationId,omitempty"`
	// Removed is set by Resolve and Refresh when the entity left the
	// store.
	Removed bool `json:"removed,omitempty"`
	// Replayed is true when a write with an Idempotency-Key repeated an
	// earlier one and syncd answered from it.
	Replayed bool `json:"-"`
}

// ServerRecord is the server's record of an entity beside the local one.
type ServerRecord struct {
	// ID is set when the record is another one than the entity's
	// ServerID (the id was deleted, swept and created again).
	ID      string          `json:"id,omitempty"`
	Version int64           `json:"version"`
	Deleted bool            `json:"deleted,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Missing says why Data is absent from a live record: too_large,
	// refresh_needed.
	Missing string `json:"missing,omitempty"`
	// Paths are the fields in conflict (JSON pointers), when the server
	// named them in its refusal (a merging server); empty: the whole
	// record.
	Paths []string `json:"paths,omitempty"`
	// Base is the record's data at the version the refused change was
	// made on, when the server's refusal carried it.
	Base json.RawMessage `json:"base,omitempty"`
}

// Operation is one queued intent.
type Operation struct {
	ID             string          `json:"id"`
	Seq            uint64          `json:"seq"`
	AccountID      string          `json:"accountId"`
	Type           string          `json:"operationType"`
	EntityType     string          `json:"entityType"`
	EntityID       string          `json:"entityId"`
	PayloadVersion int64           `json:"payloadVersion"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	// PayloadFingerprint identifies the payload sent; RequestFingerprint
	// the app request that made the operation (its Idempotency-Key replay
	// must match it).
	PayloadFingerprint string    `json:"payloadFingerprint"`
	RequestFingerprint string    `json:"requestFingerprint,omitempty"`
	State              string    `json:"state"`
	AttemptCount       int       `json:"attemptCount"`
	NextAttemptAt      time.Time `json:"nextAttemptAt"`
	LeaseOwner         string    `json:"leaseOwner,omitempty"`
	LeaseExpiresAt     time.Time `json:"leaseExpiresAt,omitzero"`
	LastErrorCode      string    `json:"lastErrorCode,omitempty"`
	LastError          string    `json:"lastError,omitempty"`
	CreatedAt          time.Time `json:"createdAt"`
	CompletedAt        time.Time `json:"completedAt,omitzero"`
	UserRetriedAt      time.Time `json:"userRetriedAt,omitzero"`
	// Declined: the server answered that it did not apply this failed
	// operation. An update of its entity, or Retry, sends the entity's
	// current data under a new key (RemoteKey).
	Declined  bool   `json:"declined,omitempty"`
	RemoteKey string `json:"remoteKey,omitempty"`
	// MaybeApplied: an attempt under the current key went out without a
	// definite answer, so a 4xx after it is not taken as declined.
	MaybeApplied bool `json:"maybeApplied,omitempty"`
	// MergedInto: a later write of the entity superseded this update
	// before it was ever sent (a mergeable type); the id of that later
	// operation, which carries its data. The operation is done.
	MergedInto string `json:"mergedInto,omitempty"`
	// After, in an ordered batch, is the operation before this one
	// while this one is held (it waits until every earlier member of its
	// group is done); cleared when released.
	After string `json:"after,omitempty"`
	// Blocked: this operation waits for an earlier member of its
	// ordered group, BlockedBy, the nearest one not done (failed, or
	// waiting its turn).
	Blocked   bool   `json:"blocked,omitempty"`
	BlockedBy string `json:"blockedBy,omitempty"`
	// App is the app whose token made the write; empty for the admin
	// token and for operations syncd made itself.
	App string `json:"app,omitempty"`
	// Paths are the fields an update changes (JSON pointers): the
	// members its merge patch set or removed, with those of the unsent
	// updates it superseded; sent beside the whole data so a merging
	// server applies only them. Nil: the whole data (a create, a delete,
	// an update syncd made).
	Paths []string `json:"paths,omitempty"`
}

// Status is syncd's one-screen summary.
type Status struct {
	AccountID   string `json:"accountId,omitempty"`
	SignedIn    bool   `json:"signedIn"`
	Online      bool   `json:"online"`
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
	// RemoteProblem is set while sending is paused as
	// remote_misconfigured: every operation failed the same way.
	RemoteProblem *RemoteProblem `json:"remoteProblem,omitempty"`
	// Counts and OldestPendingAgeSeconds cover every account's
	// operations; AccountCounts and AccountOldestPendingAgeSeconds the
	// signed-in account's (nil and 0 when signed out).
	Counts                         map[string]int `json:"counts"`
	OldestPendingAgeSeconds        float64        `json:"oldestPendingAgeSeconds"`
	AccountCounts                  map[string]int `json:"accountCounts,omitempty"`
	AccountOldestPendingAgeSeconds float64        `json:"accountOldestPendingAgeSeconds,omitempty"`
	FileSizeBytes                  int64          `json:"fileSizeBytes"`
	FreeBytes                      int64          `json:"freeBytes"`
	QueuedBytes                    int64          `json:"queuedBytes"`
	MaxQueueBytes                  int64          `json:"maxQueueBytes,omitempty"`
	QueueFull                      bool           `json:"queueFull,omitempty"`
	LastEventSeq                   uint64         `json:"lastEventSeq"`
	// Pull is the pull of the server's changes.
	Pull PullStatus `json:"pull"`
	// Apps (admin token only): per app, the operations it made that are
	// still kept, per state, in every account.
	Apps map[string]map[string]int `json:"apps,omitempty"`
	// App (app tokens only) is what the token may do; Counts and
	// AccountCounts are then those of its entity types, and the oldest
	// pending ages 0.
	App *AppScope `json:"app,omitempty"`
}

// AppScope is what an app token may do.
type AppScope struct {
	Name     string   `json:"name"`
	Types    []string `json:"types"`
	ReadOnly bool     `json:"readOnly"`
}

// PullStatus is the pull of the server's changes into the local store.
type PullStatus struct {
	Mode              string    `json:"mode"`  // auto, on or off
	State             string    `json:"state"` // off, idle, pulling, bootstrapping, paused or error
	LastPullAt        time.Time `json:"lastPullAt,omitzero"`
	Received          int64     `json:"received"`
	BootstrapReceived int64     `json:"bootstrapReceived,omitempty"`
	BootstrapProgress float64   `json:"bootstrapProgress,omitempty"` // 0 to 1, when the server says
	LastReadAt        time.Time `json:"lastReadAt,omitzero"`         // the feed's last answer
	LastError         string    `json:"lastError,omitempty"`
}

// RemoteProblem is why sending is paused as remote_misconfigured (a
// setup mistake: a redirecting URL, a missing route, a TLS failure).
type RemoteProblem struct {
	Code        string    `json:"code"` // "remote_misconfigured"
	Kind        string    `json:"kind"` // "redirect", "route_not_found" or "tls"
	Seen        string    `json:"seen"` // what syncd saw
	Fix         string    `json:"fix"`  // how to fix it
	Since       time.Time `json:"since"`
	NextCheckAt time.Time `json:"nextCheckAt"`
}

// List is one page of a listing; pass Next as After for the next page.
type List[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

// ListOptions pages and filters a listing.
type ListOptions struct {
	Limit int
	After string
	// State filters operations (pending, sending, retry_waiting, done,
	// permanent_failed); SyncState filters entities.
	State     string
	SyncState string
}

// WriteOptions are per-write options.
type WriteOptions struct {
	// IdempotencyKey, when set, becomes the operation id: repeating the
	// write with the same key and body returns the first answer.
	IdempotencyKey string
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body any, hdr http.Header, out any) (http.Header, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: reading answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct {
				Code, Message string
				Index         *int
			} `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			return nil, &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(data)), Index: -1}
		}
		ae := &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Index: -1}
		if e.Error.Index != nil {
			ae.Index = *e.Error.Index
		}
		return nil, ae
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("client: %s %s: decoding answer: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

func esc(s string) string { return url.PathEscape(s) }

func writeHeader(o []WriteOptions) http.Header {
	h := http.Header{}
	if len(o) > 0 && o[0].IdempotencyKey != "" {
		h.Set("Idempotency-Key", o[0].IdempotencyKey)
	}
	return h
}

func (c *Client) entityWrite(ctx context.Context, method, path string, body any, o []WriteOptions) (Entity, error) {
	var e Entity
	h, err := c.do(ctx, method, path, nil, body, writeHeader(o), &e)
	if err == nil {
		e.Replayed = h.Get("Idempotent-Replayed") == "true"
	}
	return e, err
}

// Create stores a new entity of type typ. id may be empty (syncd makes
// one); data must marshal to a JSON object.
func (c *Client) Create(ctx context.Context, typ, id string, data any, o ...WriteOptions) (Entity, error) {
	body := map[string]any{"data": data}
	if id != "" {
		body["id"] = id
	}
	return c.entityWrite(ctx, http.MethodPost, "/v1/entities/"+esc(typ), body, o)
}

// Update applies patch (an RFC 7396 JSON merge patch object) to an entity.
func (c *Client) Update(ctx context.Context, typ, id string, patch any, o ...WriteOptions) (Entity, error) {
	return c.entityWrite(ctx, http.MethodPatch, "/v1/entities/"+esc(typ)+"/"+esc(id), map[string]any{"data": patch}, o)
}

// Delete deletes an entity.
func (c *Client) Delete(ctx context.Context, typ, id string, o ...WriteOptions) (Entity, error) {
	return c.entityWrite(ctx, http.MethodDelete, "/v1/entities/"+esc(typ)+"/"+esc(id), nil, o)
}

// Get reads one entity.
func (c *Client) Get(ctx context.Context, typ, id string) (Entity, error) {
	var e Entity
	_, err := c.do(ctx, http.MethodGet, "/v1/entities/"+esc(typ)+"/"+esc(id), nil, nil, nil, &e)
	return e, err
}

func listQuery(o ListOptions) url.Values {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.State != "" {
		q.Set("state", o.State)
	}
	if o.SyncState != "" {
		q.Set("syncState", o.SyncState)
	}
	return q
}

// List reads a page of entities of type typ.
func (c *Client) List(ctx context.Context, typ string, o ListOptions) (List[Entity], error) {
	var l List[Entity]
	_, err := c.do(ctx, http.MethodGet, "/v1/entities/"+esc(typ), listQuery(o), nil, nil, &l)
	return l, err
}

// Operations reads a page of the operation queue.
func (c *Client) Operations(ctx context.Context, o ListOptions) (List[Operation], error) {
	var l List[Operation]
	_, err := c.do(ctx, http.MethodGet, "/v1/operations", listQuery(o), nil, nil, &l)
	return l, err
}

// Operation reads one operation.
func (c *Client) Operation(ctx context.Context, id string) (Operation, error) {
	var op Operation
	_, err := c.do(ctx, http.MethodGet, "/v1/operations/"+esc(id), nil, nil, nil, &op)
	return op, err
}

// Retry sends a permanently failed operation again.
func (c *Client) Retry(ctx context.Context, id string) (Operation, error) {
	var op Operation
	_, err := c.do(ctx, http.MethodPost, "/v1/operations/"+esc(id)+"/retry", nil, nil, nil, &op)
	return op, err
}

// Discard drops a permanently failed operation.
func (c *Client) Discard(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/operations/"+esc(id)+"/discard", nil, nil, nil, nil)
	return err
}

// Refresh reads the entity's record from the server again and settles
// the local entity with it (POST /v1/entities/{type}/{id}/refresh): a
// synced or stale entity takes it; unsent local changes stay, with the
// record beside them; Removed is set when the server holds nothing under
// the id. Errors: remote_unavailable (503), refresh_unsupported (501).
func (c *Client) Refresh(ctx context.Context, typ, id string) (Entity, error) {
	var e Entity
	_, err := c.do(ctx, http.MethodPost, "/v1/entities/"+esc(typ)+"/"+esc(id)+"/refresh", nil, nil, nil, &e)
	return e, err
}

// BatchWrite is one write of Batch: Op "create", "update" or "delete".
type BatchWrite struct {
	Op             string `json:"op"`
	Type           string `json:"type"`
	ID             string `json:"id,omitempty"`
	Data           any    `json:"data,omitempty"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// Batch makes every write in ONE transaction on syncd's side: all of
// them or, when one is refused, none (the *Error then carries Index).
// Each write without an IdempotencyKey gets a new UUID as its key here,
// fixed now, so a retry of the same call replays the same writes.
func (c *Client) Batch(ctx context.Context, writes []BatchWrite) ([]Entity, error) {
	ws := slices.Clone(writes)
	for i := range ws {
		if ws[i].IdempotencyKey == "" {
			ws[i].IdempotencyKey = uuid.NewString()
		}
	}
	var ans struct {
		Results []Entity `json:"results"`
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/batch", nil, map[string]any{"writes": ws}, nil, &ans)
	return ans.Results, err
}

// Status reads syncd's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	_, err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, nil, &s)
	return s, err
}

// SetSession signs accountID in with its access token.
func (c *Client) SetSession(ctx context.Context, accountID, accessToken string) error {
	_, err := c.do(ctx, http.MethodPut, "/v1/session", nil, map[string]string{"accountId": accountID, "accessToken": accessToken}, nil, nil)
	return err
}

// Logout signs out. policy is "keep" (the account's unsent operations
// wait for it) or "purge" (they are deleted; refused while some are
// unsent unless force).
func (c *Client) Logout(ctx context.Context, policy string, force bool) (purged int, err error) {
	q := url.Values{"policy": {policy}}
	if force {
		q.Set("force", "true")
	}
	var ans struct {
		Purged int `json:"purged"`
	}
	_, err = c.do(ctx, http.MethodDelete, "/v1/session", q, nil, nil, &ans)
	return ans.Purged, err
}
