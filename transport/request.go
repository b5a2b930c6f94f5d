package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Operation kinds of Request.Op.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
)

// Request is one attempt of one operation. The daemon builds it from a
// queue operation at send time.
type Request struct {
	// OperationID is the Idempotency-Key of the attempt: the operation's
	// id, fixed when the user's intent was made, or the new key of a new
	// attempt after the server declined it (queue.Operation.Key).
	OperationID string

	// Op is OpCreate, OpUpdate or OpDelete.
	Op string

	// EntityType selects the routes and fills {type}.
	EntityType string

	// EntityID is the entity's local id: the create body's clientId and
	// {clientId} in a route.
	EntityID string

	// ServerID is the id the server gave the entity, read from the
	// entity row at send time. Needed by routes with {serverId} (the
	// default update and delete routes).
	ServerID string

	// Data is the entity's full data (JSON), sent by create and update.
	Data json.RawMessage

	// Paths are the fields an update changes (JSON pointers, package
	// fieldmerge), sent beside the full data as "paths" so a merging
	// server applies only them. Nil: the change is the whole data, and
	// no paths are sent.
	Paths []string

	// PayloadVersion is sent by create and update as payloadVersion.
	PayloadVersion int64

	// BaseVersion is the server version the local change was made on
	// (the entity's queue.Entity.ServerVersion at send time): sent by
	// update in the body and by delete as ?baseVersion=N, so a server
	// with a conflict policy can refuse a write made on a version older
	// than its own (409 version_conflict). 0: the server never had the
	// entity as far as this device knows, and nothing is sent, unless
	// BaseNone is set.
	BaseVersion int64

	// BaseNone says that the change was made on no version of the
	// server's record although the server holds one (a create answered
	// with the record another device created first under the same id):
	// baseVersion 0 is sent, which a server with a conflict policy
	// refuses instead of applying the change as made on its version.
	BaseNone bool

	// Token is the bearer token of the operation's account, taken from
	// the current session, never from the payload.
	Token string

	// Chained makes an update follow the request before it in the same
	// SendBatch, for a remote that advertises chains
	// (BatchCapability.Chains): the remote runs it only once that one
	// was applied as sent, made on the version it produced (its
	// baseVersion is replaced by that version), and otherwise answers
	// 424, CodeDependencyFailed, without running it. A chained request
	// whose predecessor is not sent in the batch is not sent either.
	// Send ignores it.
	Chained bool
}

// createBody and updateBody are the request bodies of DESIGN.md's remote
// protocol.
type createBody struct {
	ClientID       string          `json:"clientId"`
	Data           json.RawMessage `json:"data"`
	PayloadVersion int64           `json:"payloadVersion"`
}

type updateBody struct {
	Data           json.RawMessage `json:"data"`
	PayloadVersion int64           `json:"payloadVersion"`
	BaseVersion    *int64          `json:"baseVersion,omitempty"`
	Paths          *[]string       `json:"paths,omitempty"`
}

// paths is the "paths" r sends: none for nil, else the list (empty
// included).
func (r Request) paths() *[]string {
	if r.Paths == nil {
		return nil
	}
	return &r.Paths
}

// base is the baseVersion r sends, nil for none.
func (r Request) base() *int64 {
	if r.BaseVersion > 0 || r.BaseNone {
		v := max(r.BaseVersion, 0)
		return &v
	}
	return nil
}

// invalid is the Outcome of a Request that is not sent.
func invalid(d Decision, code string, err error) Outcome {
	return Outcome{Decision: d, Code: code, Message: err.Error(), Err: err}
}

// build turns r into an HTTP request, or returns the Outcome that stops it
// before sending.
func (c *Client) build(r Request) (*http.Request, typeRoutes, *Outcome) {
	bad := func(format string, args ...any) (*http.Request, typeRoutes, *Outcome) {
		o := invalid(Permanent, CodeInvalidRequest,
			fmt.Errorf("operation %q: "+format+": %w", append([]any{r.OperationID}, append(args, ErrInvalidRequest)...)...))
		return nil, typeRoutes{}, &o
	}
	if r.OperationID == "" {
		return bad("no operation id")
	}
	if r.EntityType == "" || r.EntityID == "" {
		return bad("no entity type or entity id")
	}
	if !validHeaderValue(r.OperationID) {
		return bad("operation id is not a valid header value")
	}
	if r.Token == "" {
		o := invalid(RefreshSession, CodeMissingToken, fmt.Errorf("operation %q: %w", r.OperationID, ErrMissingToken))
		return nil, typeRoutes{}, &o
	}
	if !validHeaderValue(r.Token) {
		// net/http would refuse the request: the token, not the
		// operation, is at fault, and a new one is what helps.
		o := invalid(RefreshSession, CodeInvalidToken, fmt.Errorf("operation %q: the token holds a control character: %w", r.OperationID, ErrInvalidToken))
		return nil, typeRoutes{}, &o
	}
	tr := c.routesFor(r.EntityType)
	var (
		rt   route
		body any
	)
	switch r.Op {
	case OpCreate:
		rt, body = tr.create, createBody{ClientID: r.EntityID, Data: r.Data, PayloadVersion: r.PayloadVersion}
	case OpUpdate:
		rt, body = tr.update, updateBody{Data: r.Data, PayloadVersion: r.PayloadVersion, BaseVersion: r.base(), Paths: r.paths()}
	case OpDelete:
		rt = tr.delete
	default:
		return bad("unknown op %q", r.Op)
	}
	if rt.needsServer && r.ServerID == "" {
		o := invalid(Permanent, CodeMissingServerID,
			fmt.Errorf("operation %q: %s %s %q: %w", r.OperationID, r.Op, r.EntityType, r.EntityID, ErrMissingServerID))
		return nil, typeRoutes{}, &o
	}

	var payload []byte
	if body != nil {
		if len(r.Data) == 0 {
			return bad("%s without data", r.Op)
		}
		// Not json.Marshal: it would write '<', '>' and '&' as six bytes
		// each, and data at the size limit would no longer fit the
		// server's. Fingerprints compare parsed JSON, so the bytes of an
		// earlier attempt need not match.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(body); err != nil {
			return bad("data: %v", err)
		}
		payload = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}

	target := c.baseURL + expand(rt.path, r)
	if base := r.base(); r.Op == OpDelete && base != nil {
		sep := "?"
		if strings.Contains(target, "?") {
			sep = "&"
		}
		target += sep + "baseVersion=" + strconv.FormatInt(*base, 10)
	}
	hr, err := http.NewRequest(rt.method, target, nil)
	if err != nil {
		return bad("url %q: %v", target, err)
	}
	if payload != nil {
		// GetBody makes the body rewindable, so a resend by net/http on a
		// new connection carries the same bytes.
		hr.GetBody = func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(payload)), nil
		}
		hr.Body, _ = hr.GetBody()
		hr.ContentLength = int64(len(payload))
		hr.Header.Set("Content-Type", "application/json")
	}
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", c.userAgent)
	hr.Header.Set("Idempotency-Key", r.OperationID)
	hr.Header.Set("Authorization", "Bearer "+r.Token)
	return hr, tr, nil
}

// expand fills a route path's placeholders with path-escaped values.
func expand(path string, r Request) string {
	return strings.NewReplacer(
		"{type}", escapeSegment(r.EntityType),
		"{serverId}", escapeSegment(r.ServerID),
		"{clientId}", escapeSegment(r.EntityID),
	).Replace(path)
}

// escapeSegment escapes s as one path segment. url.PathEscape leaves dots
// alone, so the segments "." and ".." are escaped by hand: a server would
// otherwise clean them away and address another resource.
func escapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// MaxTokenBytes bounds a bearer token (ValidateToken): room for a large
// JWT (a few KiB). Many servers refuse more than 8 KiB of headers in all,
// so a longer token would fail every request anyway.
const MaxTokenBytes = 8 << 10

// ValidateToken reports whether token can be sent as a bearer token and
// read back as sent: 1 to MaxTokenBytes visible ASCII characters (RFC
// 9110 VCHAR, '!' to '~'). That admits every RFC 6750 b64token (token68)
// and refuses control characters, which net/http will not send (a
// newline would end the header), spaces and tabs, which servers trim or
// split on, and bytes outside ASCII, which servers read in different
// ways. The local API refuses such a token at PUT /v1/session.
func ValidateToken(token string) error {
	switch {
	case token == "":
		return errors.New("is empty")
	case len(token) > MaxTokenBytes:
		return fmt.Errorf("is %d bytes long, more than %d", len(token), MaxTokenBytes)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < '!' || c > '~' {
			return fmt.Errorf("holds %q at byte %d; a token is visible ASCII characters only ('!' to '~': no control characters, spaces or non-ASCII)", c, i)
		}
	}
	return nil
}

// validHeaderValue reports whether net/http will send s as a header value:
// no control characters other than tab. An id or token net/http refuses
// would otherwise fail every attempt as a network error.
func validHeaderValue(s string) bool {
	for _, c := range []byte(s) {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
