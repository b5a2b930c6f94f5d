package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tinyDisk mounts a tmpfs of size bytes for the test and returns its
// directory. It needs root (CI runs as root); elsewhere the test skips.
func tinyDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; CI runs this test as root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// A write that finds the disk full is ErrStorageFull and writes nothing;
// once space returns, writes work again in the same store, no restart.
func TestDiskFull(t *testing.T) {
	dir := tinyDisk(t, 4<<20)
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(filepath.Join(dir, "syncd.db"), Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := json.RawMessage(`{"text":"` + strings.Repeat("x", 4000) + `"}`)
	written := 0
	for ; ; written++ {
		_, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("e%05d", written), Data: data})
		if errors.Is(err, ErrStorageFull) {
			break
		}
		if err != nil {
			t.Fatalf("write %d: %v, want nil or ErrStorageFull", written, err)
		}
		if written > 10000 {
			t.Fatal("a 4 MB disk never filled")
		}
	}
	t.Logf("the disk filled after %d writes", written)
	if _, err := s.GetEntity("acct", "note", fmt.Sprintf("e%05d", written)); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("the refused write is readable: %v", err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if n := st.Counts[StatePending]; n != written {
		t.Fatalf("%d pending after the disk filled, want %d", n, written)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("after%d", i), Data: data}); err != nil {
			t.Fatalf("write %d after space returned: %v", i, err)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(filepath.Join(dir, "syncd.db"), Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, _ = s.Stats()
	if n := st.Counts[StatePending]; n != written+10 {
		t.Fatalf("%d pending after reopening, want %d", n, written+10)
	}
}
