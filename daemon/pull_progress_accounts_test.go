package daemon

import (
	"context"
	"strings"
	"sync"
	"testing"
)

// Alice is a third through her first pass; she signs out (keep), bob
// signs in (his first pass begins, its reads fail), alice signs in
// again. Her pass resumes at the same cursor and is still a third
// through: bob's pass clears only his own progress, not hers.
func TestPullProgressOtherAccountsPassKeepsMine(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	phase := 1
	d, f, _ := startPuller(t, PullOn, func(tok, after string) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if phase == 1 && strings.HasPrefix(after, "|") {
			return 200, `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":1,"data":{"v":1},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"1","hasMore":true,"progress":{"at":1,"of":3}}`
		}
		return 503, `{"error":{"code":"unavailable","message":"later"}}`
	})
	waitPull(t, d, "a third through alice's first pass", func(p PullStatus) bool { return p.BootstrapProgress > 0.3 })
	mu.Lock()
	phase = 2
	mu.Unlock()
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
