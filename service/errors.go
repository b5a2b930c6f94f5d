package service

import "errors"

var (
	// ErrNotInstalled is returned by Manager methods other than Install
	// and Status when the service is not installed.
	ErrNotInstalled = errors.New("service: not installed")
	// ErrInstalled is returned by Install when the service is already
	// installed.
	ErrInstalled = errors.New("service: already installed")
	// ErrUserNotSupported is returned for a per-user service on a service
	// manager without them (SysV init, Windows, ...).
	ErrUserNotSupported = errors.New("service: user services are not supported here")
	// ErrNeedRoot is returned for changing a system service without root.
	ErrNeedRoot = errors.New("service: a system service needs root")
	// ErrBadArgument is returned by Install for an argument the service
	// manager's file cannot carry safely (the SysV init script runs it
	// through the shell unquoted).
	ErrBadArgument = errors.New("service: argument not supported by the service manager")
	// ErrStopTimeout is returned by Run when the program did not return
	// within RunConfig.StopTimeout after it was asked to stop.
	ErrStopTimeout = errors.New("service: program did not stop in time")
)
