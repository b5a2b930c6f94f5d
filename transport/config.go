package transport

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults used where a Config field is zero.
const (
	// DefaultTimeout bounds one Send: connect, write, and reading the
	// whole response. The daemon's lease on an operation must outlive it.
	DefaultTimeout = 30 * time.Second

	// DefaultUserAgent is sent when Config.UserAgent is empty.
	DefaultUserAgent = "syncd-transport/1"

	// DefaultMaxResponseBytes caps how much of a response body is read.
	// A create's reply carries the entity's data back with the server's
	// metadata, so it is larger than the data syncd sends, which is at
	// most the queue's MaxDataBytes (1 MiB by default). A server that
	// escapes <, > and & as \u003c (Go's encoding/json does by default,
	// the reference server too) can make it up to six times the data. 8
	// MiB covers six times 1 MiB plus metadata. Raise Config.MaxResponseBytes
	// with the daemon's data limit. A reply over the cap is
	// CodeResponseTooLarge, not a parse error.
	DefaultMaxResponseBytes = 8 << 20 // 8 MiB

	// DefaultMaxIdleConnsPerHost is the idle keep-alive pool per host of
	// the default HTTP client. net/http's own default (2) would make a
	// worker pool of more than two open a new connection per request.
	DefaultMaxIdleConnsPerHost = 64

	// DefaultIDField is the field of a create response that holds the
	// server id.
	DefaultIDField = "id"

	// DefaultCreatePath, DefaultUpdatePath and DefaultDeletePath are the
	// routes of DESIGN.md's remote protocol, relative to Config.BaseURL.
	DefaultCreatePath = "/v1/{type}"
	DefaultUpdatePath = "/v1/{type}/{serverId}"
	DefaultDeletePath = "/v1/{type}/{serverId}"

	// DefaultCreateMethod, DefaultUpdateMethod and DefaultDeleteMethod
	// are the methods of the default routes.
	DefaultCreateMethod = http.MethodPost
	DefaultUpdateMethod = http.MethodPatch
	DefaultDeleteMethod = http.MethodDelete
)

// Config configures a Client. Its zero value, plus a BaseURL, is ready to
// use.
type Config struct {
	// BaseURL is the remote server, e.g. "https://api.example.com" or
	// "https://example.com/app" (route paths are appended to its path).
	// Required; scheme http or https.
	BaseURL string

	// Routes overrides the default routes per entity type. A missing
	// type, and any zero field of a Routes, means the default.
	Routes map[string]Routes

	// Timeout bounds one Send (default DefaultTimeout).
	Timeout time.Duration

	// Client sends the requests. Nil means a client with its own
	// http.Transport (a clone of http.DefaultTransport with
	// DefaultMaxIdleConnsPerHost). The Client is copied and the copy never
	// follows redirects: a redirect is answered as a Permanent outcome
	// with CodeUnexpectedStatus, because net/http would turn a redirected
	// POST into a GET and drop its body.
	Client *http.Client

	// UserAgent is sent as User-Agent (default DefaultUserAgent).
	UserAgent string

	// MaxResponseBytes caps how much of a response body is read and kept
	// in Outcome.Body (default DefaultMaxResponseBytes). It must exceed
	// the largest create reply: at least the largest entity data sent
	// plus the server's metadata (see DefaultMaxResponseBytes).
	MaxResponseBytes int64

	// Now is the clock used to turn an HTTP-date Retry-After into a
	// duration (default time.Now). A test seam.
	Now func() time.Time
}

// Routes are the requests of one entity type. Zero fields take defaults.
type Routes struct {
	Create Route
	Update Route
	Delete Route

	// IDField names the field of a create response that holds the
	// server id (default DefaultIDField). A dotted name ("data.id")
	// walks nested objects. A JSON string or number is accepted.
	IDField string
}

// Route is the method and path template of one operation.
//
// Path is relative to Config.BaseURL and starts with "/". It may hold the
// placeholders {type}, {serverId} and {clientId}; each is replaced by the
// path-escaped value. A route whose path holds {serverId} cannot be sent
// before the server id is known (CodeMissingServerID). An update or delete
// route may address the entity by {clientId} instead, for backends that
// key records by the client's id.
type Route struct {
	Method string
	Path   string
}

// placeholders are the names a route path may hold.
var placeholders = []string{"{type}", "{serverId}", "{clientId}"}

// route is a validated, defaulted Route.
type route struct {
	method      string
	path        string
	needsServer bool
}

// typeRoutes is a validated, defaulted Routes.
type typeRoutes struct {
	create, update, delete route
	idField                []string
}

func newRoute(r Route, method, path string) (route, error) {
	out := route{
		method: cmp.Or(r.Method, method),
		path:   cmp.Or(r.Path, path),
	}
	if !validMethod(out.method) {
		return route{}, fmt.Errorf("method %q: %w", out.method, ErrInvalidConfig)
	}
	if !strings.HasPrefix(out.path, "/") {
		return route{}, fmt.Errorf("path %q does not start with /: %w", out.path, ErrInvalidConfig)
	}
	rest := out.path
	for _, p := range placeholders {
		rest = strings.ReplaceAll(rest, p, "")
	}
	if strings.ContainsAny(rest, "{}?#") {
		return route{}, fmt.Errorf("path %q: unknown placeholder or query: %w", out.path, ErrInvalidConfig)
	}
	out.needsServer = strings.Contains(out.path, "{serverId}")
	return out, nil
}

func newTypeRoutes(r Routes) (typeRoutes, error) {
	var (
		out typeRoutes
		err error
	)
	if out.create, err = newRoute(r.Create, DefaultCreateMethod, DefaultCreatePath); err != nil {
		return typeRoutes{}, fmt.Errorf("create: %w", err)
	}
	if out.update, err = newRoute(r.Update, DefaultUpdateMethod, DefaultUpdatePath); err != nil {
		return typeRoutes{}, fmt.Errorf("update: %w", err)
	}
	if out.delete, err = newRoute(r.Delete, DefaultDeleteMethod, DefaultDeletePath); err != nil {
		return typeRoutes{}, fmt.Errorf("delete: %w", err)
	}
	field := cmp.Or(r.IDField, DefaultIDField)
	out.idField = strings.Split(field, ".")
	for _, f := range out.idField {
		if f == "" {
			return typeRoutes{}, fmt.Errorf("id field %q: %w", field, ErrInvalidConfig)
		}
	}
	return out, nil
}

// validMethod reports whether m is an HTTP token (RFC 9110 section 5.6.2).
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range []byte(m) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func parseBaseURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, fmt.Errorf("BaseURL is empty: %w", ErrInvalidConfig)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("BaseURL %q: %w: %w", s, ErrInvalidConfig, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("BaseURL %q: scheme must be http or https: %w", s, ErrInvalidConfig)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("BaseURL %q: no host: %w", s, ErrInvalidConfig)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("BaseURL %q: query, fragment or user info not allowed: %w", s, ErrInvalidConfig)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	return u, nil
}
