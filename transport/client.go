package transport

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// Client sends operations to the remote server and classifies the
// outcomes. It is safe for concurrent use.
type Client struct {
	baseURL   string // scheme://host/path, no trailing slash
	routes    map[string]typeRoutes
	defaults  typeRoutes
	timeout   time.Duration
	hc        *http.Client
	userAgent string
	maxBody   int64
	now       func() time.Time
}

// New returns a Client for cfg. It fails, wrapping ErrInvalidConfig, on a
// BaseURL or route that cannot be used.
func New(cfg Config) (*Client, error) {
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{
		baseURL:   base.Scheme + "://" + base.Host + base.EscapedPath(),
		routes:    make(map[string]typeRoutes, len(cfg.Routes)),
		timeout:   cmp.Or(cfg.Timeout, DefaultTimeout),
		userAgent: cmp.Or(cfg.UserAgent, DefaultUserAgent),
		maxBody:   cmp.Or(cfg.MaxResponseBytes, DefaultMaxResponseBytes),
		now:       cfg.Now,
	}
	if c.timeout < 0 {
		return nil, fmt.Errorf("Timeout %v: %w", cfg.Timeout, ErrInvalidConfig)
	}
	if c.maxBody < 0 {
		return nil, fmt.Errorf("MaxResponseBytes %d: %w", cfg.MaxResponseBytes, ErrInvalidConfig)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.defaults, err = newTypeRoutes(Routes{}); err != nil {
		return nil, err // unreachable: the defaults are valid
	}
	for typ, r := range cfg.Routes {
		tr, err := newTypeRoutes(r)
		if err != nil {
			return nil, fmt.Errorf("routes of %q: %w", typ, err)
		}
		c.routes[typ] = tr
	}
	if cfg.Client != nil {
		hc := *cfg.Client
		c.hc = &hc
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
		c.hc = &http.Client{Transport: t}
	}
	c.hc.CheckRedirect = func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}
	return c, nil
}

// CloseIdleConnections closes the idle keep-alive connections of the
// underlying HTTP client.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

func (c *Client) routesFor(entityType string) typeRoutes {
	if tr, ok := c.routes[entityType]; ok {
		return tr
	}
	return c.defaults
}

// Send makes one attempt of r and classifies its outcome. It never
// returns an Outcome without a Decision.
//
// One Send may put the request on the wire more than once: net/http's
// Transport resends a request that carries an Idempotency-Key on a new
// connection when a reused connection dies before any answer. The
// server's idempotency record makes that safe; Outcome.Sends says how many
// wire attempts there were. The daemon counts one attempt per Send.
//
// Config.Timeout bounds the whole exchange, reading the body included. If
// ctx ends first, the outcome is Retry with CodeCanceled: the operation
// may or may not have reached the server, and should simply be sent again
// later without penalty.
func (c *Client) Send(ctx context.Context, r Request) Outcome {
	hr, tr, stop := c.build(r)
	if stop != nil {
		return *stop
	}

	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
	defer cancel()
	ctx, sends := countSends(ctx)
	hr = hr.WithContext(ctx)

	method, url := hr.Method, hr.URL.String()
	resp, err := c.hc.Do(hr)
	if err != nil {
		o := c.failed(ctx, r, err)
		o.Sends = int(sends.Load())
		o.Method, o.URL = method, url
		return o
	}
	body, truncated, err := readBody(resp.Body, c.maxBody)
	resp.Body.Close()
	readAt := c.now()
	if err != nil {
		// The status line came but the body did not: the answer is lost.
		// A 2xx may have committed; the resend replays it.
		o := c.failed(ctx, r, err)
		o.Status = resp.StatusCode
		o.Sends = int(sends.Load())
		o.Method, o.URL = method, url
		return o
	}
	o := c.classify(r, tr, resp, body, truncated, readAt)
	o.Sends = int(sends.Load())
	o.Method, o.URL = method, url
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		o.Location = cut(resp.Header.Get("Location"))
	}
	return o
}

// countSends returns ctx with a trace that counts the times net/http
// wrote the whole request onto a connection (Outcome.Sends). A write
// that failed left the request incomplete: the server cannot have
// processed it.
func countSends(ctx context.Context) (context.Context, *atomic.Int32) {
	sends := new(atomic.Int32)
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				sends.Add(1)
			}
		},
	}), sends
}

// Probe asks whether the remote answers, without sending an operation or
// credentials: a HEAD request for the base URL, bounded by
// Config.Timeout. status is the answer's status: any answer at all (a 404
// or a 401 too) means the server is reachable. err is the network error,
// or ErrTimeout, when no answer came.
func (c *Client) Probe(ctx context.Context) (status int, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, c.baseURL+"/", nil)
	if err != nil {
		return 0, fmt.Errorf("transport: probe: %w", err)
	}
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.hc.Do(req)
	if err != nil {
		if context.Cause(ctx) == ErrTimeout {
			err = fmt.Errorf("%w after %v: %w", ErrTimeout, c.timeout, err)
		}
		return 0, fmt.Errorf("transport: probe %s: %w", c.baseURL, err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// readBody reads at most max bytes of b; truncated reports that b held
// more. It then drains up to a small amount more so that the connection
// can be reused.
func readBody(b io.Reader, max int64) (body []byte, truncated bool, err error) {
	limit := max
	if limit < math.MaxInt64 {
		limit++ // one byte more tells a body of exactly max from a longer one
	}
	body, err = io.ReadAll(io.LimitReader(b, limit))
	if err != nil {
		return body, false, err
	}
	if int64(len(body)) > max {
		body, truncated = body[:max], true
	}
	io.CopyN(io.Discard, b, 4<<10) // best effort; a huge body closes the conn
	return body, truncated, nil
}

// getJSON is the GET of the remote's reads (the changes feed, one
// record, the capabilities) for the account whose token is given: the
// answer's status and body, read up to max bytes (truncated says there
// was more), within timeout. what names the read in errors; a request
// that got no answer in time is ErrTimeout.
func (c *Client) getJSON(ctx context.Context, what, token, target string, timeout time.Duration, max int64) (status int, body []byte, truncated bool, err error) {
	if err := ValidateToken(token); err != nil {
		return 0, nil, false, fmt.Errorf("%w: the token %v", ErrInvalidToken, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, ErrTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, nil, false, fmt.Errorf("transport: %s: %w", what, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.hc.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrTimeout) {
			err = ErrTimeout
		}
		return 0, nil, false, fmt.Errorf("transport: %s: %w", what, err)
	}
	defer resp.Body.Close()
	body, truncated, err = readBody(resp.Body, max)
	if err != nil {
		return 0, nil, false, fmt.Errorf("transport: %s: reading the answer: %w", what, err)
	}
	return resp.StatusCode, body, truncated, nil
}

// failed classifies an error from sending or reading: always Retry.
func (c *Client) failed(ctx context.Context, r Request, err error) Outcome {
	o := Outcome{Decision: Retry, Code: CodeNetwork}
	var ne net.Error
	switch {
	case context.Cause(ctx) == ErrTimeout:
		o.Code = CodeTimeout
		err = fmt.Errorf("%w after %v: %w", ErrTimeout, c.timeout, err)
	case ctx.Err() != nil:
		o.Code = CodeCanceled
	case errors.As(err, &ne) && ne.Timeout():
		o.Code = CodeTimeout
	case tlsProblem(err):
		o.Code = CodeTLS
	}
	o.Err = fmt.Errorf("transport: %s %s %q (operation %q): %w", r.Op, r.EntityType, r.EntityID, r.OperationID, err)
	o.Message = cut(err.Error())
	return o
}

// tlsProblem reports whether err says the TLS handshake with the remote
// failed for a reason that will not pass by itself: the certificate is
// not trusted or does not match the host, the server refused the
// handshake, or it speaks plain HTTP on an https URL.
func tlsProblem(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	var alert tls.AlertError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &record) || errors.As(err, &alert) ||
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// classify turns a response read in full, or cut at Config.MaxResponseBytes
// (truncated), into an Outcome.
func (c *Client) classify(r Request, tr typeRoutes, resp *http.Response, body []byte, truncated bool, now time.Time) Outcome {
	o := Outcome{
		Status:    resp.StatusCode,
		Body:      body,
		Truncated: truncated,
		Replayed:  strings.EqualFold(strings.TrimSpace(resp.Header.Get("Idempotent-Replayed")), "true"),
	}
	retryAfter, hasRetryAfter := ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	o.RetryAfter = retryAfter

	st := resp.StatusCode
	if st >= 200 && st <= 299 {
		o.ServerVersion = recordVersion(body)
		if r.Op != OpDelete && !truncated {
			o.Data = recordData(body)
		}
		if r.Op != OpCreate {
			o.Decision, o.ServerID = Done, r.ServerID
			return o
		}
		if truncated {
			// The server applied the create, but its id is in a reply we
			// did not read whole; a resend replays the same reply.
			o.Decision, o.Code = Permanent, CodeResponseTooLarge
			o.Message = fmt.Sprintf("create answered %d with a body over the %d bytes read (transport.Config.MaxResponseBytes)", st, c.maxBody)
			o.Err = fmt.Errorf("operation %q: %s: %w", r.OperationID, o.Message, ErrResponseTooLarge)
			return o
		}
		id, ok := serverID(body, tr.idField)
		if !ok {
			o.Decision, o.Code = Permanent, CodeInvalidResponse
			o.Message = fmt.Sprintf("create answered %d without a server id in %q", st, strings.Join(tr.idField, "."))
			o.Err = fmt.Errorf("operation %q: %s: %w", r.OperationID, o.Message, ErrInvalidResponse)
			return o
		}
		o.Decision, o.ServerID = Done, id
		if st == http.StatusOK {
			o.OtherData, o.ServerPayloadVersion = otherData(body, r.Data)
		}
		return o
	}

	o.ServerCode, o.Message = errorBody(body)
	switch {
	case st == http.StatusNotFound && r.Op == OpDelete:
		// Already gone: the effect the delete wanted holds.
		o.Decision, o.Code, o.ServerID = Done, CodeNotFound, r.ServerID
		return o
	case st == http.StatusGone && r.Op == OpDelete:
		o.Decision, o.Code, o.ServerID = Done, CodeGone, r.ServerID
		return o
	case st == http.StatusConflict && o.ServerCode == ServerCodeVersionConflict:
		o.Decision, o.Code, o.Current = Conflict, CodeVersionConflict, conflictCurrent(body)
	case (st == http.StatusGone || st == http.StatusNotFound) && r.Op == OpUpdate && r.ServerID != "":
		// The record the update was made on is deleted there (410), or
		// deleted and swept (404): the same conflict either way, since
		// the server once had it under this id.
		o.Decision, o.Code, o.Current = Conflict, CodeDeletedOnServer, &Current{Deleted: true}
	case st == http.StatusFailedDependency && o.ServerCode == CodeDependencyFailed && r.Chained:
		// Not run: what it follows was not applied as sent.
		o.Decision, o.Code = Retry, CodeDependencyFailed
	case st == http.StatusRequestTimeout:
		o.Decision, o.Code = Retry, CodeRequestTimeout
	case st == http.StatusTooManyRequests:
		o.Decision, o.Code = Retry, CodeRateLimited
	case st == http.StatusServiceUnavailable:
		o.Decision, o.Code = Retry, CodeUnavailable
	case st >= 500 && st <= 599:
		o.Decision, o.Code = Retry, CodeServerError
	case st == http.StatusConflict && (hasRetryAfter || o.ServerCode == "" || serverInFlightCodes[o.ServerCode]):
		o.Decision, o.Code = Retry, CodeInFlight
	case st == http.StatusUnauthorized:
		o.Decision, o.Code = RefreshSession, CodeUnauthorized
	case st == http.StatusForbidden:
		o.Decision, o.Code = Permanent, CodeForbidden
	case st == http.StatusNotFound:
		o.Decision, o.Code = Permanent, CodeNotFound
	case st == http.StatusGone:
		o.Decision, o.Code = Permanent, CodeGone
	case st == http.StatusUnprocessableEntity && o.ServerCode == ServerCodeKeyReused:
		o.Decision, o.Code = Permanent, CodePayloadConflict
	case st == http.StatusBadRequest || st == http.StatusUnprocessableEntity:
		o.Decision, o.Code = NeedsUserAction, CodeValidation
	case st >= 400 && st <= 499:
		o.Decision, o.Code = NeedsUserAction, CodeRejected
	default: // 1xx, 3xx and anything outside 100..599
		o.Decision, o.Code = Permanent, CodeUnexpectedStatus
	}
	if o.Message == "" {
		o.Message = http.StatusText(st)
	}
	o.Err = fmt.Errorf("operation %q: %s %s: %d %s: %w", r.OperationID, r.Op, r.EntityType, st, o.Code, ErrStatus)
	return o
}

// recordVersion reads a write answer's "version", 0 when absent or not a
// whole number.
func recordVersion(body []byte) int64 {
	var rec struct {
		Version json.RawMessage `json:"version"`
	}
	if json.Unmarshal(body, &rec) != nil || len(rec.Version) == 0 {
		return 0
	}
	return max(payloadVersion(rec.Version), 0)
}

// recordData reads a write answer's "data" object, nil when it has none.
func recordData(body []byte) json.RawMessage {
	var rec struct {
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(body, &rec) != nil || len(rec.Data) == 0 || rec.Data[0] != '{' {
		return nil
	}
	return rec.Data
}

// conflictCurrent reads the "current" record of a version_conflict
// answer: its id, version, data and whether it is deleted, and a
// merging server's "paths" in conflict and "base" record.
func conflictCurrent(body []byte) *Current {
	var ans struct {
		Current struct {
			Version json.RawMessage `json:"version"`
			Deleted bool            `json:"deleted"`
			Data    json.RawMessage `json:"data"`
		} `json:"current"`
		Paths []string `json:"paths"`
		Base  struct {
			Data json.RawMessage `json:"data"`
		} `json:"base"`
	}
	cur := &Current{}
	if json.Unmarshal(body, &ans) != nil {
		return cur
	}
	cur.Version = max(payloadVersion(ans.Current.Version), 0)
	cur.Deleted = ans.Current.Deleted
	if id, ok := serverID(body, []string{"current", "id"}); ok {
		cur.ID = id
	}
	if !cur.Deleted && len(ans.Current.Data) > 0 && ans.Current.Data[0] == '{' {
		cur.Data = ans.Current.Data
		if fieldmerge.ParsePaths(ans.Paths) == nil {
			cur.Paths = ans.Paths
		}
		if len(ans.Base.Data) > 0 && ans.Base.Data[0] == '{' {
			cur.Base = ans.Base.Data
		}
	}
	return cur
}

// serverID reads the server id at path in a JSON object body. Strings and
// numbers are accepted (a number keeps its JSON text).
func serverID(body []byte, path []string) (string, bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	for _, f := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		v = obj[f]
	}
	switch id := v.(type) {
	case string:
		return id, id != ""
	case json.Number:
		return id.String(), true
	}
	return "", false
}

// otherData reports whether the record in a create's answer (its "data"
// object) holds other data than sent, and returns the record's
// "payloadVersion". Any difference counts, a member the server holds
// that the create did not send too: it may be what a discarded earlier
// create left there, and a false alarm costs only one update of the same
// data, where a missed one leaves the discarded data on the server.
func otherData(body []byte, sent json.RawMessage) (differs bool, version int64) {
	var rec struct {
		Data           json.RawMessage `json:"data"`
		PayloadVersion json.RawMessage `json:"payloadVersion"`
	}
	if json.Unmarshal(body, &rec) != nil {
		return false, 0
	}
	var held map[string]any
	if decodeObject(rec.Data, &held) != nil || held == nil {
		return false, 0
	}
	// A member the record lacks or holds another value for, at any
	// depth: a record holding more (a merging server laid the create
	// over another device's) still holds the create's data.
	diff, err := fieldmerge.Diff(sent, rec.Data)
	if err != nil {
		return false, 0
	}
	for _, p := range diff {
		if _, ok, _ := fieldmerge.Get(sent, p); ok {
			return true, payloadVersion(rec.PayloadVersion)
		}
	}
	return false, 0
}

// payloadVersion reads a record's version: a JSON number or a string of
// one, as long as it is a whole number. Anything else is 0, unknown.
func payloadVersion(raw json.RawMessage) int64 {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int64(f)
	}
	return 0
}

// decodeObject decodes a JSON object keeping numbers as written.
func decodeObject(data []byte, v *map[string]any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// errorBody reads {"error":{"code","message"}}; anything else gives "".
func errorBody(body []byte) (code, message string) {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "", ""
	}
	return e.Error.Code, cut(e.Error.Message)
}

// cut bounds a message kept for the user.
func cut(s string) string {
	const max = 1 << 10
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}
