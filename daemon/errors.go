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
