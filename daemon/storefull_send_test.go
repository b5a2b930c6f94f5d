//go:build linux

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// tinyDisk mounts a tmpfs of size bytes for the test and returns its
// directory (as queue's TestDiskFull does). It needs root (CI runs as
// root); elsewhere the test skips.
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

// fillDisk writes the file ballast in dir until the disk has no room
// left, and returns a func that removes it (space returns).
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for chunk := 64 << 10; chunk > 0; chunk /= 2 {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill the disk: %v", err)
				}
				break
			}
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
	}
}

// doneOps reports whether every operation of ids has turned done.
func doneOps(ids ...string) func([]queue.Event) bool {
	return func(es []queue.Event) bool {
		done := map[string]bool{}
		for _, ev := range es {
			if ev.Type == queue.EventOperationState && ev.State == queue.StateDone {
				done[ev.OperationID] = true
			}
		}
		for _, id := range ids {
			if !done[id] {
				return false
			}
		}
		return true
	}
}

// bigNote is entity data large enough that recording its completion
// needs pages the file does not have yet: with the disk full, the
// completion fails. (With several such operations, the pages one frees
// can make room for another's: the tests use one.)
var bigNote = `{"text":"` + strings.Repeat("x", 300<<10) + `"}`

// fullDiskEnv sets up a started daemon whose queue lives on a 4 MB disk,
// and creates one operation. The disk fills once the server has
// answered it, before the answer is recorded; free makes room again.
func fullDiskEnv(t *testing.T, cfg Config) (e *env, logs *logCapture, id string, free func()) {
	t.Helper()
	dir := tinyDisk(t, 4<<20)
	logs = newLogCapture(t)
	cfg.Logger = slog.New(logs)
	full := make(chan func(), 1)
	cfg.TestHookAfterResponse = func(op queue.Operation, o transport.Outcome) {
		if o.Decision != transport.Done {
			t.Errorf("operation %s: %s %s, want done", op.ID, o.Code, message(o))
		}
		full <- fillDisk(t, dir)
	}
	e = setup(t, envOpts{dir: dir, cfg: cfg})
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	id = e.create("n0", bigNote).Operation.ID
	free = func() { (<-full)() }
	return e, logs, id, free
}

// The server applied the operation, and its completion could not be
// written for a full disk: the daemon keeps the answer and records it as
// soon as space returns, not once the lease has run out, and without
// sending it again.
func TestFullDiskCompletionRecordedWhenSpaceReturns(t *testing.T) {
	e, logs, id, free := fullDiskEnv(t, Config{})
	logs.wait(t, "the failed completion in the log", 1, func(r logRecord) bool { return r.attrs["operation"] == id })
	e.wantState(id, queue.StateSending)

	free()
	e.clock.Advance(time.Second) // far from the lease's 90 s
	e.d.Notify()
	e.events.wait(t, "the completion recorded once space returned", doneOps(id))

	op := e.wantState(id, queue.StateDone)
	if op.AttemptCount != 1 {
		t.Errorf("%d attempts, want 1", op.AttemptCount)
	}
	if n := faultproxy.Count(e.proxy.Log(), forwardedKey(op.Key())); n != 1 {
		t.Errorf("the operation reached the server %d times, want 1", n)
	}
	if ent := e.entity("n0"); ent.SyncState != queue.SyncSynced {
		t.Errorf("entity %s, want synced", ent.SyncState)
	}
	if errs := logs.records(atLevel(slog.LevelError)); len(errs) > 0 {
		t.Errorf("ERROR lines for a full disk:\n%s", logs)
	}
	if warns := logs.records(atLevel(slog.LevelWarn)); len(warns) != 1 {
		t.Errorf("%d warnings, want 1:\n%s", len(warns), logs)
	}
}

// Minutes of a full disk with a completion kept and tried again: at
// most one warning a minute, which counts what it did not log, and no
// ERROR line; when space returns the completion is recorded and the log
// says so once.
func TestFullDiskCompletionLogsQuietly(t *testing.T) {
	// A lease longer than the test: the operation is not claimed again.
	e, logs, id, free := fullDiskEnv(t, Config{Lease: time.Hour})
	logs.wait(t, "the failed completion in the log", 1, func(r logRecord) bool { return r.attrs["operation"] == id })

	// Every wake tries the write again.
	const minutes = 5
	for range minutes * 60 / 5 {
		e.clock.Advance(5 * time.Second)
		e.d.Notify()
	}
	// The last wake finds the clock minutes on: one more warning, with
	// what the minutes before it did not log.
	warns := logs.wait(t, "a second warning", 2, atLevel(slog.LevelWarn))
	if _, ok := warns[1].attrs["suppressed"]; !ok {
		t.Errorf("the second warning does not count what was not logged: %v", warns[1].attrs)
	}
	e.wantState(id, queue.StateSending)

	free()
	e.d.Notify()
	e.events.wait(t, "the completion recorded", doneOps(id))
	logs.wait(t, "the recovery line", 1, func(r logRecord) bool {
		return r.level == slog.LevelInfo && strings.Contains(r.msg, "space returned")
	})

	if warns := logs.records(atLevel(slog.LevelWarn)); len(warns) > minutes+1 {
		t.Errorf("%d warnings in %d minutes of injected time:\n%s", len(warns), minutes, logs)
	}
	if errs := logs.records(atLevel(slog.LevelError)); len(errs) > 0 {
		t.Errorf("ERROR lines for a full disk:\n%s", logs)
	}
	op := e.wantState(id, queue.StateDone)
	if n := faultproxy.Count(e.proxy.Log(), forwardedKey(op.Key())); n != 1 {
		t.Errorf("the operation reached the server %d times, want 1", n)
	}
}

// A daemon that stops with an answer kept gives it up (it does not wait
// for space) and says so; the operation is still sending, and once its
// lease runs out it is sent again and answered from the server's
// idempotency record: one record on the server.
func TestFullDiskStopGivesUpKeptAnswers(t *testing.T) {
	e, logs, id, free := fullDiskEnv(t, Config{})
	logs.wait(t, "the first warning", 1, atLevel(slog.LevelWarn))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	e.d.Stop(ctx)
	if ctx.Err() != nil {
		t.Fatal("Stop waited for space")
	}
	logs.wait(t, "the warning at stop", 1, func(r logRecord) bool {
		return r.level == slog.LevelWarn && strings.Contains(r.msg, "stopping")
	})
	e.wantState(id, queue.StateSending)

	free()
	e.clock.Advance(DefaultLease + time.Second)
	d2, err := New(Config{Store: e.store, Transport: e.client, Now: e.clock.Now, Logger: testLogger(t), Pull: PullOff, Batch: BatchOff})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Stop(t.Context())
	e.d = d2
	e.drain()
	op := e.wantState(id, queue.StateDone)
	if n := faultproxy.Count(e.proxy.Log(), forwardedKey(op.Key())); n != 2 {
		t.Errorf("the operation reached the server %d times, want 2 (the second answered from its idempotency record)", n)
	}
	e.oneRecord("n0")
	if errs := logs.records(atLevel(slog.LevelError)); len(errs) > 0 {
		t.Errorf("ERROR lines for a full disk:\n%s", logs)
	}
}
