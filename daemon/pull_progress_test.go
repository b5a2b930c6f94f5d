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

// A full pass that begins again for the same account (signed out with a
// purge, signed in again) shows no progress until its own first page:
// the bar of the pass before it would claim records not yet read.
func TestPullProgressClearedForANewPass(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	phase := 1
	d, f, _ := startPuller(t, PullOn, func(_, after string) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if phase == 1 && strings.HasPrefix(after, "|") {
			return 200, `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":1,"data":{"v":1},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"1","hasMore":true,"progress":{"at":1,"of":3}}`
		}
		return 503, `{"error":{"code":"unavailable","message":"later"}}`
	})
	waitPull(t, d, "a third through the first pass", func(p PullStatus) bool { return p.BootstrapProgress > 0.3 })

	if _, err := d.Logout(context.Background(), LogoutPurge, true); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	phase = 2
	mu.Unlock()
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
