package config

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Defaults of the settings that are not another package's default.
const (
	// DefaultServiceName is the name syncd is installed under as an OS
	// service.
	DefaultServiceName = "syncd"
	// DefaultLogLevel and DefaultLogFormat: text lines at info and above.
	DefaultLogLevel  = "info"
	DefaultLogFormat = "text"
	// DefaultShutdownTimeout bounds a graceful stop: the sends in flight
	// get this long to finish before they are cut off and their
	// operations go back to pending. The API's own drain (up to 5 s) and
	// the event streams' close come before it (see docs/service.md).
	DefaultShutdownTimeout = 5 * time.Second
	// FileName is the config file's name in the per-OS config directory.
	FileName = "syncd.json"
	// SocketOff, as the socket setting, serves the local API on Listen
	// only, without a Unix socket.
	SocketOff = "off"
	// UIOn and UIOff are the values of the ui setting; UIOn is the
	// default.
	UIOn  = "on"
	UIOff = "off"
	// bodyOverhead is what a request body may carry beyond the entity's
	// data (the JSON envelope): MaxBodyBytes defaults to MaxDataBytes
	// plus this.
	bodyOverhead = localapi.DefaultMaxBodyBytes - queue.DefaultMaxDataBytes
)

// Settings is everything a user can tune in `syncd run`. The JSON names
// are the config file's keys.
type Settings struct {
	// DataDir holds the queue file (syncd.db) and the API token
	// (api-token). Default: the per-OS data directory (DefaultPaths).
	DataDir string `json:"dataDir"`
	// Listen is the local API's address. Default 127.0.0.1:7419.
	Listen string `json:"listen"`
	// ForceListen allows a Listen address that is not loopback.
	ForceListen bool `json:"forceListen"`
	// Socket is the path of the local API's Unix socket, served beside
	// Listen to processes of the daemon's own user (localapi.ListenUnix),
	// or SocketOff. Default: DataDir/syncd.sock on Linux and macOS; off
	// on Windows, where any other value is an error.
	Socket string `json:"socket"`
	// socketDefault says that Socket is the default, not a choice: a
	// default socket that cannot be made (the data directory is open to
	// other users, or its path is too long) is skipped with a warning,
	// while a chosen one stops syncd run.
	socketDefault bool
	// AllowedHosts are Host names (or addresses) the local API accepts
	// besides the loopback names: the names clients use to reach a
	// forced Listen address, such as the machine's LAN name.
	AllowedHosts []string `json:"allowedHosts"`
	// Remote is the base URL of the app's server. Empty: the embedded
	// reference server.
	Remote string `json:"remote"`
	// AllowedOrigins are the browser origins (http://localhost:3000)
	// allowed to call the local API.
	AllowedOrigins []string `json:"allowedOrigins"`
	// EntityTypes, if not empty, are the entity types apps may use.
	EntityTypes []string `json:"entityTypes"`
	// MergeableTypes are the entity types whose queued, never sent
	// updates a later update or delete of the same entity supersedes
	// (queue.Config.MergeableTypes): an entity edited a hundred times
	// offline is sent once. Leave out types whose every write the server
	// must see.
	MergeableTypes []string `json:"mergeableTypes"`
	// Concurrency bounds the operations sent at once.
	Concurrency int `json:"concurrency"`
	// RequestTimeout bounds one request to the remote.
	RequestTimeout time.Duration `json:"requestTimeout"`
	// MaxOperationAge: an operation older than this (counted from the
	// latest of its creation and the user's retry) that may have been
	// applied fails for the user to review instead of being resent, and
	// retrying it gives up at this age. One that cannot have been
	// applied is sent whatever its age. Keep it below the server's
	// idempotency retention.
	MaxOperationAge time.Duration `json:"maxOperationAge"`
	// DoneRetention is how long sent operations are kept.
	DoneRetention time.Duration `json:"doneRetention"`
	// MaxDataBytes is the largest entity data accepted.
	MaxDataBytes int `json:"maxDataBytes"`
	// MaxBodyBytes caps local API request bodies. Default MaxDataBytes
	// plus 64 KiB.
	MaxBodyBytes int64 `json:"maxBodyBytes"`
	// MaxQueueBytes bounds what the operations waiting to be sent take
	// (queue.Config.MaxQueueBytes): past it, app creates and updates
	// answer 507 storage_full until the queue drains. Default 2 GiB; 0:
	// no limit.
	MaxQueueBytes int64 `json:"maxQueueBytes"`
	// Pull says whether the server's changes are pulled into the local
	// store: auto (when the remote has a changes feed), on or off.
	Pull string `json:"pull"`
	// Batch says whether ready operations are sent in batches: auto
	// (where the remote advertises a batch route in GET
	// /v1/capabilities), on or off.
	Batch string `json:"batch"`
	// UI says whether the status page is served under /ui/ (docs/ui.md):
	// on (the default) or off, when every /ui/ route and POST
	// /v1/ui/links answer 404 not_found.
	UI string `json:"ui"`
	// LockTimeout is how long a start waits for another syncd to release
	// the data directory before giving up.
	LockTimeout time.Duration `json:"lockTimeout"`
	// ShutdownTimeout bounds a graceful stop.
	ShutdownTimeout time.Duration `json:"shutdownTimeout"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"logLevel"`
	// LogFormat is text or json (log/slog's handlers).
	LogFormat string `json:"logFormat"`
	// ServiceName is the OS service's name: the one `syncd service`
	// manages and the one `syncd run` reports to the service manager.
	ServiceName string `json:"serviceName"`
}

// Defaults are the built-in settings for a scope (system or user), the
// lowest layer of the precedence. DataDir is empty if the scope has no
// default location here. Socket is empty: its default follows the
// DataDir finally chosen.
func Defaults(scope Scope, getenv func(string) string) Settings {
	p, _ := DefaultPaths(scope, getenv)
	return Settings{
		DataDir:         p.DataDir,
		Listen:          localapi.DefaultListenAddr,
		Concurrency:     daemon.DefaultConcurrency,
		RequestTimeout:  transport.DefaultTimeout,
		MaxOperationAge: daemon.DefaultMaxOperationAge,
		DoneRetention:   queue.DefaultDoneRetention,
		MaxDataBytes:    queue.DefaultMaxDataBytes,
		MaxQueueBytes:   queue.DefaultMaxQueueBytes,
		Pull:            string(daemon.PullAuto),
		Batch:           string(daemon.BatchAuto),
		UI:              UIOn,
		LockTimeout:     queue.DefaultLockTimeout,
		ShutdownTimeout: DefaultShutdownTimeout,
		LogLevel:        DefaultLogLevel,
		LogFormat:       DefaultLogFormat,
		ServiceName:     DefaultServiceName,
	}
}

// Scratch is the built-in settings for a self-contained daemon in
// dataDir, as `syncd bench` runs one: no config file or environment,
// the local API on a free loopback port and no Unix socket, syncing to
// the embedded reference server.
func Scratch(dataDir string) (Settings, error) {
	s := Defaults(User, func(string) string { return "" })
	s.DataDir, s.Listen, s.Socket = dataDir, "127.0.0.1:0", SocketOff
	return s, s.finish()
}

// serviceNameRE is what a service name may be: it becomes file names
// (/etc/init.d/NAME, NAME.service, NAME.plist).
var serviceNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidServiceName reports whether name can name the OS service.
func ValidServiceName(name string) error {
	if !serviceNameRE.MatchString(name) {
		return fmt.Errorf("%w: service name %q: want letters, digits, '.', '_' and '-'", ErrInvalid, name)
	}
	return nil
}

// finish fills the derived defaults and checks every setting.
func (s *Settings) finish() error {
	if s.DataDir == "" {
		return fmt.Errorf("%w: dataDir: no default data directory here; set --data-dir", ErrInvalid)
	}
	abs, err := filepath.Abs(s.DataDir)
	if err != nil {
		return fmt.Errorf("%w: dataDir %q: %v", ErrInvalid, s.DataDir, err)
	}
	s.DataDir = abs
	if err := localapi.CheckListenAddr(s.Listen, s.ForceListen); err != nil {
		return fmt.Errorf("%w: listen: %v (add --force-listen, or forceListen: true in the config file, to serve on it anyway)", ErrInvalid, err)
	}
	if err := s.finishSocket(); err != nil {
		return err
	}
	if s.Remote != "" {
		u, err := url.Parse(s.Remote)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: remote %q: want an http or https URL", ErrInvalid, Redact(s.Remote))
		}
		// Credentials belong to the session (PUT /v1/session), never to
		// the URL: it is logged, shown by `ps` and written into service
		// definitions.
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%w: remote %q: give a plain base URL, without user info, query or fragment", ErrInvalid, Redact(s.Remote))
		}
	}
	for _, o := range s.AllowedOrigins {
		if err := checkOrigin(o); err != nil {
			return err
		}
	}
	for _, h := range s.AllowedHosts {
		if err := checkHost(h); err != nil {
			return err
		}
	}
	for _, t := range s.EntityTypes {
		if err := queue.ValidateEntityType(t); err != nil {
			return fmt.Errorf("%w: entityTypes: %v", ErrInvalid, err)
		}
	}
	for _, t := range s.MergeableTypes {
		if err := queue.ValidateEntityType(t); err != nil {
			return fmt.Errorf("%w: mergeableTypes: %v", ErrInvalid, err)
		}
	}
	if s.Concurrency < 1 {
		return fmt.Errorf("%w: concurrency %d: want 1 or more", ErrInvalid, s.Concurrency)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"requestTimeout", s.RequestTimeout},
		{"maxOperationAge", s.MaxOperationAge},
		{"doneRetention", s.DoneRetention},
		{"lockTimeout", s.LockTimeout},
		{"shutdownTimeout", s.ShutdownTimeout},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%w: %s %s: want a positive duration", ErrInvalid, d.key, d.v)
		}
	}
	if s.MaxDataBytes < 1 {
		return fmt.Errorf("%w: maxDataBytes %d: want 1 or more", ErrInvalid, s.MaxDataBytes)
	}
	if s.MaxQueueBytes < 0 {
		return fmt.Errorf("%w: maxQueueBytes %d: want 0 (no limit) or more", ErrInvalid, s.MaxQueueBytes)
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = int64(s.MaxDataBytes) + bodyOverhead
	}
	if s.MaxBodyBytes <= int64(s.MaxDataBytes) {
		return fmt.Errorf("%w: maxBodyBytes %d: want more than maxDataBytes (%d)", ErrInvalid, s.MaxBodyBytes, s.MaxDataBytes)
	}
	switch daemon.BatchMode(s.Batch) {
	case daemon.BatchAuto, daemon.BatchOn, daemon.BatchOff:
	default:
		return fmt.Errorf("%w: batch %q: want auto, on or off", ErrInvalid, s.Batch)
	}
	switch daemon.PullMode(s.Pull) {
	case daemon.PullAuto, daemon.PullOn, daemon.PullOff:
	default:
		return fmt.Errorf("%w: pull %q: want auto, on or off", ErrInvalid, s.Pull)
	}
	switch s.UI {
	case UIOn, UIOff:
	default:
		return fmt.Errorf("%w: ui %q: want on or off", ErrInvalid, s.UI)
	}
	switch s.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("%w: logLevel %q: want debug, info, warn or error", ErrInvalid, s.LogLevel)
	}
	switch s.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("%w: logFormat %q: want text or json", ErrInvalid, s.LogFormat)
	}
	return ValidServiceName(s.ServiceName)
}

// finishSocket fills the socket's default (in DataDir, or off where the
// OS has no socket listener), makes a path absolute, and checks that it
// can name a socket here.
func (s *Settings) finishSocket() error {
	switch {
	case s.Socket == SocketOff:
		return nil
	case s.Socket == "" && !localapi.UnixSocketSupported:
		s.Socket = SocketOff
		return nil
	case s.Socket == "":
		s.Socket, s.socketDefault = filepath.Join(s.DataDir, localapi.SocketFileName), true
		return nil // syncd run skips it, warning, if it cannot be used
	default:
		abs, err := filepath.Abs(s.Socket)
		if err != nil {
			return fmt.Errorf("%w: socket %q: %v", ErrInvalid, s.Socket, err)
		}
		s.Socket = abs
	}
	if err := localapi.CheckSocketPath(s.Socket); err != nil {
		return fmt.Errorf("%w: socket: %v (set socket to %q to serve on listen only)", ErrInvalid, err, SocketOff)
	}
	return nil
}

// SocketIsDefault reports whether Socket is the default one
// (DataDir/syncd.sock), which syncd run skips with a warning when it
// cannot be made, rather than one set in the config, a flag or the
// environment, which it must serve.
func (s *Settings) SocketIsDefault() bool { return s.socketDefault }

// hostRE is a DNS name: letters, digits, '-' and '.'.
var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$`)

// checkHost accepts a bare host name or IP address: no port, scheme or
// wildcard, which would let a rebound DNS name through.
func checkHost(h string) error {
	if net.ParseIP(h) == nil && !hostRE.MatchString(h) {
		return fmt.Errorf("%w: allowedHosts: want a host name or IP address without a port, like syncd-box.lan or 192.168.1.10, got %q", ErrInvalid, h)
	}
	return nil
}

func checkOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || strings.HasSuffix(o, "/") {
		return fmt.Errorf("%w: allowedOrigins: want an origin like http://localhost:3000, got %q", ErrInvalid, o)
	}
	return nil
}
