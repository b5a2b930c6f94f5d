package daemon

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/syncd/syncd/transport"
)

// A page's progress is kept for its account only when it makes sense: a
// server's nonsense (negative, past the head, no head) clears it rather
// than showing a bar past its end.
func TestPullProgressKeepsOnlySense(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   *transport.Progress
		want pullProgress
	}{
		{&transport.Progress{At: 500, Of: 1500}, pullProgress{"alice", 500, 1500}},
		{&transport.Progress{At: 1500, Of: 1500}, pullProgress{"alice", 1500, 1500}},
		{nil, pullProgress{}},
		{&transport.Progress{At: 0, Of: 0}, pullProgress{}},
		{&transport.Progress{At: 1501, Of: 1500}, pullProgress{}},
		{&transport.Progress{At: -1, Of: 1500}, pullProgress{}},
		{&transport.Progress{At: 1, Of: -5}, pullProgress{}},
	} {
		var p pullState
		p.setProgress("bob", &transport.Progress{At: 1, Of: 2}) // an earlier page's
		p.setProgress("alice", tc.in)
		if p.progress != tc.want {
			t.Errorf("%+v: kept %+v, want %+v", tc.in, p.progress, tc.want)
		}
	}
}

// startThirdThrough starts a puller for alice whose feed answers her
// first page a third through the pass and 503 to everything after; after
// phase2, the first page is 503 too.
func startThirdThrough(t *testing.T) (d *Daemon, f *fakeFeed, phase2 func()) {
	t.Helper()
	var mu sync.Mutex
	first := true
	d, f, _ = startPuller(t, PullOn, func(_, after string) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if first && strings.HasPrefix(after, "|") {
			return 200, `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":1,"data":{"v":1},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"1","hasMore":true,"progress":{"at":1,"of":3}}`
		}
		return 503, `{"error":{"code":"unavailable","message":"later"}}`
	})
	waitPull(t, d, "a third through alice's first pass", func(p PullStatus) bool { return p.BootstrapProgress > 0.3 })
	return d, f, func() {
		mu.Lock()
		first = false
		mu.Unlock()
	}
}

// A full pass that begins again for the same account (signed out with a
// purge, signed in again) shows no progress until its own first page:
// the bar of the pass before it would claim records not yet read.
func TestPullProgressClearedForANewPass(t *testing.T) {
	t.Parallel()
	d, f, phase2 := startThirdThrough(t)
	if _, err := d.Logout(context.Background(), LogoutPurge, true); err != nil {
		t.Fatal(err)
	}
	phase2()
	if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	// A read that the new pass makes comes after it began.
	for {
		f.mu.Lock()
		q := f.queries[len(f.queries)-1]
		f.mu.Unlock()
		if st, err := d.store.LoadPullState("alice"); err != nil {
			t.Fatal(err)
		} else if st.FullPass && st.Cursor == "" && !strings.Contains(q, "after=1") {
			break
		}
		<-f.hits
	}
	st, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pull.BootstrapProgress != 0 {
		t.Fatalf("the new pass shows the old one's progress: %v", st.Pull.BootstrapProgress)
	}
}

// Alice is a third through her first pass; she signs out (keep), bob
// signs in (his first pass begins, its reads fail), alice signs in
// again. Her pass resumes at the same cursor and is still a third
// through: bob's pass clears only his own progress, not hers.
func TestPullProgressOtherAccountsPassKeepsMine(t *testing.T) {
	t.Parallel()
	d, f, phase2 := startThirdThrough(t)
	phase2()
	if _, err := d.Logout(context.Background(), LogoutKeep, true); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSession(context.Background(), "bob", "bob.1"); err != nil {
		t.Fatal(err)
	}
	for { // bob's pass has begun and read (503)
		st, err := d.store.LoadPullState("bob")
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		last := f.tokens[len(f.tokens)-1]
		f.mu.Unlock()
		if st.FullPass && last == "bob.1" {
			break
		}
		<-f.hits
	}
	if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	for { // alice reads again (503)
		f.mu.Lock()
		last := f.tokens[len(f.tokens)-1]
		f.mu.Unlock()
		if last == "alice.1" {
			break
		}
		<-f.hits
	}
	st, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := d.store.LoadPullState("alice")
	t.Logf("alice: cursor %q fullPass %v, bootstrapProgress %v", ps.Cursor, ps.FullPass, st.Pull.BootstrapProgress)
	if st.Pull.BootstrapProgress < 0.3 {
		t.Fatalf("alice's pass is a third through (cursor %q) but shows %v", ps.Cursor, st.Pull.BootstrapProgress)
	}
}

// A read that retries after failures keeps the pull's state error (and
// its last error) until it answers: it used to say bootstrapping (or
// pulling) from the moment it was sent, so a status read during a slow
// retry, however long, showed nothing wrong. Once one answers, the next
// page's read says bootstrapping again.
func TestPullStateStaysErrorWhileRetrying(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	held := []chan struct{}{make(chan struct{}), make(chan struct{})}
	release := []chan struct{}{make(chan struct{}), make(chan struct{})}
	d, _, _ := startPuller(t, PullOn, func(_, _ string) (int, string) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1, 2:
			return 503, `{"error":{"code":"unavailable","message":"later"}}`
		case 3:
			close(held[0])
			<-release[0]
			return 200, `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":1,"data":{"v":1},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"1","hasMore":true}`
		case 4:
			close(held[1])
			<-release[1]
		}
		return 200, `{"changes":[],"cursor":"1","hasMore":false}`
	})
	state := func() PullStatus {
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Pull
	}
	<-held[0] // the third read, after two failures, is in flight
	if p := state(); p.State != PullStateError || !strings.Contains(p.LastError, "503") {
		t.Errorf("while a retry is in flight the pull says %q (%q); want error with the last one", p.State, p.LastError)
	}
	close(release[0])
	<-held[1] // it answered a page; the next one's read is in flight
	if p := state(); p.State != PullStateBootstrapping || p.LastError != "" {
		t.Errorf("reading the second page after the retry answered, the pull says %q (%q); want bootstrapping", p.State, p.LastError)
	}
	close(release[1])
	waitPull(t, d, "the pull to catch up", func(p PullStatus) bool { return p.State == PullStateIdle && p.LastError == "" })
}
