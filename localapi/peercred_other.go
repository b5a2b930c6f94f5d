//go:build !linux && !darwin

package localapi

import (
	"errors"
	"net"
	"os"
)

// peerCredSupported: ListenUnix refuses to run here (Windows and the
// Unix systems without a peer-credential call wired up keep the loopback
// TCP listener).
const peerCredSupported = false

const maxSocketPath = 0

func peerCred(*net.UnixConn) (uid, pid int, err error) {
	return 0, 0, errors.New("localapi: peer credentials are not supported here")
}

func fileOwner(os.FileInfo) (uid int, ok bool) { return 0, false }
