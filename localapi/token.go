package localapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// TokenFileName is the API token's file in the data directory.
const TokenFileName = "api-token"

// tokenBytes is the token's entropy: 32 random bytes, 64 hex digits.
const tokenBytes = 32

// LoadOrCreateToken returns the API token kept in dataDir/api-token and
// the file's path, creating the file (mode 0600, 32 random bytes as hex)
// on first start and reusing it after, so apps keep working across
// restarts.
//
// On Unix, a token file that users other than its owner may read (any
// group or other permission bit) is refused with ErrTokenFileMode, not
// silently fixed: another user may already have read the token. Delete
// the file to have a new token made, or chmod 600 it to keep the old one.
func LoadOrCreateToken(dataDir string) (token, path string, err error) {
	path = filepath.Join(dataDir, TokenFileName)
	token, err = readToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return token, path, err
	}
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", path, fmt.Errorf("localapi: make API token: %w", err)
	}
	if err := writeFileAtomic(path, []byte(hex.EncodeToString(b)+"\n")); err != nil {
		return "", path, fmt.Errorf("localapi: write API token: %w", err)
	}
	// Read it back: a process that raced us may have written its own.
	token, err = readToken(path)
	return token, path, err
}

func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%w: %s has mode %04o; run chmod 600 on it to keep this token, or delete it to make a new one", ErrTokenFileMode, path, fi.Mode().Perm())
	}
	buf := make([]byte, 4*tokenBytes)
	n, _ := f.Read(buf)
	token := strings.TrimSpace(string(buf[:n]))
	if len(token) != 2*tokenBytes {
		return "", fmt.Errorf("%w: %s does not hold %d hex digits; delete it to make a new one", ErrTokenFileInvalid, path, 2*tokenBytes)
	}
	if _, err := hex.DecodeString(token); err != nil {
		return "", fmt.Errorf("%w: %s does not hold hex digits; delete it to make a new one", ErrTokenFileInvalid, path)
	}
	return token, nil
}

// writeFileAtomic writes data to path through a temporary file (mode
// 0600) that is synced and renamed, so a crash never leaves half a token.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// Link, not rename: if another process created the file meanwhile,
	// keep its token rather than replace one it may have handed out.
	if err := os.Link(f.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return os.Rename(f.Name(), path)
	}
	return nil
}

// CheckListenAddr refuses a listen address whose host is not a loopback
// IP or "localhost", unless force is set: the API's token is its only
// lock, and it is not meant to be reachable from the network. An empty
// host (":7419", all interfaces) is not loopback.
func CheckListenAddr(addr string, force bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("localapi: listen address %q: %w", addr, err)
	}
	if port == "" {
		return fmt.Errorf("localapi: listen address %q has no port", addr)
	}
	if force {
		return nil
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %q; use a 127.0.0.1 or [::1] address, or force it", ErrNotLoopback, addr)
}
