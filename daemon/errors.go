package daemon

import "errors"

// Errors of the session guard.
var (
	// ErrNoSession is returned for work that needs a signed-in account
	// when there is none.
	ErrNoSession = errors.New("daemon: no session")
	// ErrInvalidSession is returned by SetSession for an empty token or an
	// invalid account id.
	ErrInvalidSession = errors.New("daemon: invalid session")
	// ErrInvalidPolicy is returned by Logout for an unknown policy.
	ErrInvalidPolicy = errors.New("daemon: unknown logout policy")
)

// Errors of the lifecycle.
var (
	// ErrNoTransport is returned by Start and RunOnce when the Config has
	// no Transport.
	ErrNoTransport = errors.New("daemon: no transport configured")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("daemon: already started")
	// ErrStopped is returned by Start after Stop.
	ErrStopped = errors.New("daemon: stopped")
)
