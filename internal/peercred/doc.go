// Package peercred reads who is at the other end of a Unix socket, as
// the kernel recorded it when the connection was made: SO_PEERCRED on
// Linux, LOCAL_PEERCRED and LOCAL_PEERPID on macOS. The local API's
// listener uses it to refuse other users' processes; its clients use it
// to refuse a socket that another user's process serves (one that took
// the path while syncd was stopped would otherwise receive the token).
//
// The credentials are those of the process that connected (or
// listened), at that moment: a descriptor passed on afterwards keeps
// them. That is why the local API still asks for its token.
package peercred
