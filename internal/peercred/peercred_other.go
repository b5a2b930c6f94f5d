//go:build !linux && !darwin

package peercred

import (
	"errors"
	"net"
	"os"
)

// Supported says that Get works here: not on Windows, nor on the Unix
// systems without a peer-credential call wired up (they keep the
// loopback TCP listener).
const Supported = false

// MaxPath is 0: no socket path fits.
const MaxPath = 0

// Get fails here.
func Get(*net.UnixConn) (uid, pid int, err error) {
	return 0, 0, errors.New("peercred: peer credentials are not supported here")
}

// FileOwner knows no owner here.
func FileOwner(os.FileInfo) (uid int, ok bool) { return 0, false }
