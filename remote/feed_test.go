package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/changefeed"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/internal/clocktest"
)

func pageOf(t *testing.T, r result) changefeed.Page {
	t.Helper()
	var p changefeed.Page
	if r.status != http.StatusOK {
		t.Fatalf("changes: %d %s", r.status, r.body)
	}
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("changes answer %q: %v", r.body, err)
	}
	return p
}

// readAll pages through the actor's feed from cursor and returns the
// latest change of each record and the final cursor.
func (h *harness) readAll(t *testing.T, tok, cursor string, limit int) (map[string]changefeed.Change, string) {
	t.Helper()
	got := map[string]changefeed.Change{}
	for {
		p := pageOf(t, h.must(t, "GET", "/v1/changes?limit="+strconv.Itoa(limit)+"&after="+cursor, tok, "", ""))
		for _, c := range p.Changes {
			if old, ok := got[c.ClientID]; ok && old.Version >= c.Version {
				t.Fatalf("change of %s went back from version %d to %d", c.ClientID, old.Version, c.Version)
			}
			got[c.ClientID] = c
		}
		cursor = p.Cursor
		if !p.HasMore {
			return got, cursor
		}
	}
}

// TestChangesFeed: the feed on both storages: every record at its latest
// version, in write order, deletes as tombstones, scoped by actor,
// paged, an empty page keeping the cursor, cursors checked.
func TestChangesFeed(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		ids := map[string]string{}
		for i := range 5 {
			cid := fmt.Sprintf("n%d", i)
			r := h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"`+cid+`","data":{"v":0}}`)
			ids[cid] = entityOf(t, r).ID
		}
		h.must(t, "POST", "/v1/notes", "bob", newKey(), `{"clientId":"bobs","data":{}}`)
		key := newKey()
		h.must(t, "PATCH", "/v1/notes/"+ids["n1"], "alice", key, `{"data":{"v":1}}`)
		h.must(t, "DELETE", "/v1/notes/"+ids["n2"], "alice", newKey(), "")

		got, cursor := h.readAll(t, "alice", "", 2)
		if len(got) != 5 {
			t.Fatalf("alice's feed has %d records: %v", len(got), got)
		}
		if c := got["n1"]; c.Version != 2 || string(c.Data) != `{"v":1}` || c.OperationID != key || c.ID != ids["n1"] {
			t.Fatalf("n1 = %+v", c)
		}
		if c := got["n2"]; !c.Deleted || c.Data != nil || c.Version != 2 {
			t.Fatalf("n2 = %+v", c)
		}
		if _, ok := got["bobs"]; ok {
			t.Fatal("bob's record in alice's feed")
		}
		// Order: a page lists records in the order of their last write.
		p := pageOf(t, h.must(t, "GET", "/v1/changes", "alice", "", ""))
		if n := len(p.Changes); n != 5 || p.Changes[3].ClientID != "n1" || p.Changes[4].ClientID != "n2" || p.HasMore {
			t.Fatalf("order: %+v", p.Changes)
		}
		// Nothing new: an empty page, same cursor.
		if p := pageOf(t, h.must(t, "GET", "/v1/changes?after="+cursor, "alice", "", "")); len(p.Changes) != 0 || p.Cursor != cursor || p.HasMore {
			t.Fatalf("empty page %+v, want cursor %s", p, cursor)
		}
		// A new write shows after the cursor, alone.
		h.must(t, "PATCH", "/v1/notes/"+ids["n0"], "alice", newKey(), `{"data":{"v":9}}`)
		if p := pageOf(t, h.must(t, "GET", "/v1/changes?after="+cursor, "alice", "", "")); len(p.Changes) != 1 || p.Changes[0].ClientID != "n0" {
			t.Fatalf("after the cursor: %+v", p)
		}
		for _, tt := range []struct {
			query  string
			status int
			code   string
		}{
			{"after=x", 400, CodeInvalidCursor},
			{"after=-1", 400, CodeInvalidCursor},
			{"after=999999", 410, CodeCursorExpired}, // past the actor's sequence: another database
			{"limit=0", 400, CodeValidation},
			{"wait=soon", 400, CodeValidation},
		} {
			r := h.must(t, "GET", "/v1/changes?"+tt.query, "alice", "", "")
			if r.status != tt.status || codeOf(t, r) != tt.code {
				t.Errorf("%s: %d %s, want %d %s", tt.query, r.status, r.body, tt.status, tt.code)
			}
		}
		if r := h.must(t, "GET", "/v1/changes?limit=5000", "alice", "", ""); len(pageOf(t, r).Changes) != 5 {
			t.Fatalf("a limit over 1000 is clamped, not refused: %s", r.body)
		}
		if r := h.must(t, "GET", "/v1/changes", "", "", ""); r.status != http.StatusUnauthorized {
			t.Fatalf("no token: %d", r.status)
		}
		caps := h.must(t, "GET", "/v1/capabilities", "alice", "", "")
		if caps.status != 200 || !strings.Contains(caps.body, `"changes":true`) {
			t.Fatalf("capabilities: %d %s", caps.status, caps.body)
		}
	})
}

// TestTombstonesExpire: after TombstoneRetention a tombstone is swept,
// and a cursor from before it answers 410; a full read does not.
func TestTombstonesExpire(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := clocktest.At(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
		cfg := b.config(t)
		cfg.Now = clock.Now
		h := setup(t, cfg)
		a := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"a","data":{}}`))
		_, early := h.readAll(t, "alice", "", 100)
		bb := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"b","data":{}}`))
		h.must(t, "DELETE", "/v1/notes/"+bb.ID, "alice", newKey(), "")
		_, late := h.readAll(t, "alice", "", 100)
		_ = a

		clock.Advance(DefaultTombstoneRetention - time.Second)
		if n, err := h.srv.SweepTombstones(context.Background()); err != nil || n != 0 {
			t.Fatalf("sweep before the window ends: %d %v", n, err)
		}
		clock.Advance(2 * time.Second)
		if n, err := h.srv.SweepTombstones(context.Background()); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		if r := h.must(t, "GET", "/v1/changes?after="+early, "alice", "", ""); r.status != http.StatusGone || codeOf(t, r) != CodeCursorExpired {
			t.Fatalf("cursor from before the swept tombstone: %d %s", r.status, r.body)
		}
		if r := h.must(t, "GET", "/v1/changes?after="+late, "alice", "", ""); r.status != http.StatusOK {
			t.Fatalf("cursor from after it: %d %s", r.status, r.body)
		}
		got, _ := h.readAll(t, "alice", "", 100)
		if len(got) != 1 || got["a"].ClientID != "a" {
			t.Fatalf("a full read after the sweep: %v", got)
		}
		// The clientId is free again: a create makes a new record.
		if r := h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"b","data":{}}`); r.status != http.StatusCreated || entityOf(t, r).Version != 1 {
			t.Fatalf("create after the sweep: %d %s", r.status, r.body)
		}
	})
}

// TestConflictPolicy: last writer wins by default; with reject, a
// baseVersion below the current version answers 409 version_conflict
// with the current record, stored under the key; no baseVersion, or the
// current one, is applied.
func TestConflictPolicy(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		cfg := b.config(t)
		cfg.RejectConflicts = []string{"tasks"}
		cfg.Conflicts = map[string]Policy{"*": PolicyLWW} // record-level: today's rule
		h := setup(t, cfg)
		for _, typ := range []string{"notes", "tasks"} {
			e := entityOf(t, h.must(t, "POST", "/v1/"+typ, "alice", newKey(), `{"clientId":"c","data":{"v":1}}`))
			h.must(t, "PATCH", "/v1/"+typ+"/"+e.ID, "alice", newKey(), `{"data":{"v":2},"baseVersion":1}`) // version 2
			before := pageOf(t, h.must(t, "GET", "/v1/changes?limit=1000", "alice", "", "")).Cursor
			key := newKey()
			r := h.must(t, "PATCH", "/v1/"+typ+"/"+e.ID, "alice", key, `{"data":{"v":"stale"},"baseVersion":1}`)
			if typ == "notes" {
				if r.status != http.StatusOK || entityOf(t, r).Version != 3 {
					t.Fatalf("lww: %d %s", r.status, r.body)
				}
				continue
			}
			var ans struct {
				Error   struct{ Code string }
				Current Entity
			}
			if r.status != http.StatusConflict || json.Unmarshal([]byte(r.body), &ans) != nil || ans.Error.Code != CodeVersionConflict ||
				ans.Current.Version != 2 || string(ans.Current.Data) != `{"v":2}` || r.header.Get("Retry-After") != "" {
				t.Fatalf("reject: %d %s", r.status, r.body)
			}
			if again := h.must(t, "PATCH", "/v1/"+typ+"/"+e.ID, "alice", key, `{"data":{"v":"stale"},"baseVersion":1}`); !again.replayed || again.status != 409 {
				t.Fatalf("the 409 is stored under its key: %d replayed=%v", again.status, again.replayed)
			}
			// The refused write changed nothing: the feed has nothing new,
			// and its page ends at a cursor the server accepts.
			p := pageOf(t, h.must(t, "GET", "/v1/changes?after="+before, "alice", "", ""))
			if len(p.Changes) != 0 || p.HasMore {
				t.Fatalf("the feed after a 409: %+v", p)
			}
			if r := h.must(t, "GET", "/v1/changes?after="+p.Cursor, "alice", "", ""); r.status != http.StatusOK {
				t.Fatalf("the cursor after a 409: %d %s", r.status, r.body)
			}
			if r := h.must(t, "DELETE", "/v1/"+typ+"/"+e.ID+"?baseVersion=1", "alice", newKey(), ""); r.status != http.StatusConflict {
				t.Fatalf("stale delete: %d %s", r.status, r.body)
			}
			if r := h.must(t, "PATCH", "/v1/"+typ+"/"+e.ID, "alice", newKey(), `{"data":{"v":3}}`); r.status != http.StatusOK || entityOf(t, r).Version != 3 {
				t.Fatalf("no baseVersion: %d %s", r.status, r.body)
			}
			if r := h.must(t, "DELETE", "/v1/"+typ+"/"+e.ID+"?baseVersion=3", "alice", newKey(), ""); r.status != http.StatusOK || !entityOf(t, r).Deleted {
				t.Fatalf("delete on the current version: %d %s", r.status, r.body)
			}
			if r := h.must(t, "DELETE", "/v1/"+typ+"/"+e.ID+"?baseVersion=x", "alice", newKey(), ""); r.status != http.StatusBadRequest {
				t.Fatalf("bad baseVersion: %d %s", r.status, r.body)
			}
		}
	})
}

// TestLongPoll: a poll with nothing new is held and answers as soon as a
// write of its actor commits, not for another actor's; on PostgreSQL
// across two servers on one database too.
func TestLongPoll(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		cfg := b.config(t)
		h := setup(t, cfg)
		writer := h
		if b.name == "postgres" {
			// Another replica on the same database takes the write.
			cfg2 := cfg
			cfg2.DevTokens = true
			s2, err := New(cfg2)
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(s2.Handler())
			t.Cleanup(func() { hs.Close(); s2.Close() })
			writer = &harness{srv: s2, url: hs.URL, client: h.client}
		}
		_, cursor := h.readAll(t, "alice", "", 100)
		polled := make(chan result, 1)
		go func() {
			r, err := h.do("GET", "/v1/changes?wait=60&after="+cursor, "alice", "", "")
			if err != nil {
				t.Error(err)
			}
			polled <- r
		}()
		// Another actor's write does not answer alice's poll; hers does.
		writer.must(t, "POST", "/v1/notes", "bob", newKey(), `{"clientId":"x","data":{}}`)
		writer.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"y","data":{}}`)
		r := <-polled
		p := pageOf(t, r)
		if len(p.Changes) != 1 || p.Changes[0].ClientID != "y" {
			t.Fatalf("long poll answered %+v", p)
		}
	})
}

// TestFeedUnderConcurrentWriters: many writers of one actor and a reader
// paging meanwhile; when the writers are done, the reader (continuing
// from its cursor) has every record at its final version: no committed
// change was skipped.
func TestFeedUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		cfg := b.config(t)
		cfg.Conflicts = map[string]Policy{"*": PolicyLWW} // record-level
		h := setup(t, cfg)
		const writers, each = 8, 15
		var wg sync.WaitGroup
		stop := make(chan struct{})
		final := sync.Map{}
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					cid := fmt.Sprintf("w%d-%d", w, i%5)
					r, err := h.do("POST", "/v1/notes", "alice", newKey(), `{"clientId":"`+cid+`","data":{"i":`+strconv.Itoa(i)+`}}`)
					if err != nil || (r.status != 201 && r.status != 200) {
						t.Errorf("create: %v %d %s", err, r.status, r.body)
						return
					}
					e := entityOf(t, r)
					if r.status == 200 {
						r, err = h.do("PATCH", "/v1/notes/"+e.ID, "alice", newKey(), `{"data":{"i":`+strconv.Itoa(i)+`}}`)
						if err != nil || r.status != 200 {
							t.Errorf("update: %v %d %s", err, r.status, r.body)
							return
						}
						e = entityOf(t, r)
					}
					final.Store(cid, e.Version)
				}
			})
		}
		seen := map[string]int64{}
		cursor := ""
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			for {
				r, err := h.do("GET", "/v1/changes?limit=7&after="+cursor, "alice", "", "")
				if err != nil || r.status != 200 {
					t.Errorf("changes: %v %d %s", err, r.status, r.body)
					return
				}
				var p changefeed.Page
				json.Unmarshal([]byte(r.body), &p)
				for _, c := range p.Changes {
					seen[c.ClientID] = max(seen[c.ClientID], c.Version)
				}
				cursor = p.Cursor
				if !p.HasMore {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-readDone
		// One last read from where the reader stopped.
		rest, _ := h.readAll(t, "alice", cursor, 7)
		for cid, c := range rest {
			seen[cid] = max(seen[cid], c.Version)
		}
		n := 0
		final.Range(func(k, v any) bool {
			n++
			if seen[k.(string)] != v.(int64) {
				t.Errorf("%s: the reader saw version %d, the final one is %d", k, seen[k.(string)], v)
			}
			return true
		})
		if n != writers*5 {
			t.Fatalf("%d records, want %d", n, writers*5)
		}
	})
}

// TestBatchRoute: each operation of a batch goes through the gate on its
// own: its own record and replay, 422 for a reused key, a refusal that
// does not stop the others; the whole batch resent replays item by item.
func TestBatchRoute(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		ex := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"x","data":{}}`))
		body := `{"operations":[
			{"idempotencyKey":"k1","method":"POST","path":"/v1/notes","body":{"clientId":"a","data":{"v":1}}},
			{"idempotencyKey":"k2","method":"POST","path":"/v1/notes","body":{"clientId":"b","data":[1]}},
			{"idempotencyKey":"k3","method":"PATCH","path":"/v1/notes/` + ex.ID + `","body":{"data":{"v":2}}},
			{"idempotencyKey":"k4","method":"DELETE","path":"/v1/notes/` + ex.ID + `"},
			{"method":"POST","path":"/v1/notes","body":{"clientId":"c","data":{}}},
			{"idempotencyKey":"k5","method":"POST","path":"/v1/batch","body":{"operations":[]}}]}`
		type res struct {
			Status   int
			Body     json.RawMessage
			Replayed bool
		}
		var first struct{ Results []res }
		r := h.must(t, "POST", "/v1/batch", "alice", "", body)
		if r.status != 200 || json.Unmarshal([]byte(r.body), &first) != nil || len(first.Results) != 6 {
			t.Fatalf("batch: %d %s", r.status, r.body)
		}
		want := []int{201, 400, 200, 200, 400, 400}
		for i, st := range want {
			if first.Results[i].Status != st || first.Results[i].Replayed {
				t.Errorf("operation %d: %d %s, want %d", i, first.Results[i].Status, first.Results[i].Body, st)
			}
		}
		var again struct{ Results []res }
		r = h.must(t, "POST", "/v1/batch", "alice", "", body)
		json.Unmarshal([]byte(r.body), &again)
		for i := range []int{0, 1, 2, 3} {
			if !again.Results[i].Replayed || string(again.Results[i].Body) != string(first.Results[i].Body) {
				t.Errorf("resent operation %d: replayed=%v %s", i, again.Results[i].Replayed, again.Results[i].Body)
			}
		}
		if n := h.count(t, "alice", "notes", "a"); n != 1 {
			t.Fatalf("records of a: %d", n)
		}
		// The key of operation 0 alone, with another body: 422.
		if r := h.must(t, "POST", "/v1/notes", "alice", "k1", `{"clientId":"z","data":{}}`); r.status != 422 {
			t.Fatalf("a batch's key reused alone: %d", r.status)
		}
		caps := h.must(t, "GET", "/v1/capabilities", "alice", "", "")
		if !strings.Contains(caps.body, `"maxOperations":100`) {
			t.Fatalf("capabilities %s", caps.body)
		}
		if r := h.must(t, "POST", "/v1/batch", "alice", "", `{"operations":[]}`); r.status != 400 {
			t.Fatalf("empty batch: %d", r.status)
		}
		if r := h.must(t, "POST", "/v1/batch", "", "", body); r.status != 401 {
			t.Fatalf("no token: %d", r.status)
		}
	})
}

// sweepAll moves the clock past the tombstone retention and sweeps, so
// every tombstone made so far is gone, and returns how many were.
func sweepAll(t *testing.T, h *harness, clock *clocktest.Clock) int {
	t.Helper()
	clock.Advance(DefaultTombstoneRetention + time.Second)
	n, err := h.srv.SweepTombstones(context.Background())
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	return n
}

// TestFullReadEndsAtAcceptedCursor (issue 25, 1): an actor whose newest
// changes are swept tombstones. A read from the beginning, in pages of
// any size, is answered to its end (no page below the horizon answers
// 410), and its last page's cursor is one the server accepts: reading on
// from it is an empty page at the same cursor, then the next write.
// Before, the last page ended at the last live record, below the
// horizon, and every device looped 410, full read, 410.
func TestFullReadEndsAtAcceptedCursor(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := clocktest.New()
		cfg := b.config(t)
		cfg.Now = clock.Now
		h := setup(t, cfg)
		for i := range 3 {
			h.must(t, "POST", "/v1/notes", "alice", newKey(), fmt.Sprintf(`{"clientId":"n%d","data":{}}`, i))
		}
		for i := range 2 {
			d := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), fmt.Sprintf(`{"clientId":"d%d","data":{}}`, i)))
			h.must(t, "DELETE", "/v1/notes/"+d.ID, "alice", newKey(), "")
		}
		if n := sweepAll(t, h, clock); n != 2 {
			t.Fatalf("swept %d tombstones, want 2", n)
		}
		var cursor string
		for _, limit := range []int{1, 2, 100} {
			var got map[string]changefeed.Change
			got, cursor = h.readAll(t, "alice", "", limit)
			if len(got) != 3 {
				t.Fatalf("limit %d: a full read has %d records: %v", limit, len(got), got)
			}
			r := h.must(t, "GET", "/v1/changes?after="+cursor, "alice", "", "")
			if r.status != http.StatusOK {
				t.Fatalf("limit %d: the cursor %s that ended a full read answers %d %s", limit, cursor, r.status, r.body)
			}
			if p := pageOf(t, r); len(p.Changes) != 0 || p.Cursor != cursor || p.HasMore {
				t.Fatalf("limit %d: after the end of a full read: %+v, want an empty page at %s", limit, p, cursor)
			}
		}
		h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"n3","data":{}}`)
		if p := pageOf(t, h.must(t, "GET", "/v1/changes?after="+cursor, "alice", "", "")); len(p.Changes) != 1 || p.Changes[0].ClientID != "n3" {
			t.Fatalf("the next write after the cursor: %+v", p)
		}
	})
}

// TestFullReadAcrossSweeps: a read from the beginning, page by page, is
// not disturbed by the sweep of tombstones deleted before it began (it
// never saw their records), but when a record it already read is deleted
// and its tombstone swept before the read reaches it, the next page
// answers 410: the read would otherwise end holding that record.
func TestFullReadAcrossSweeps(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := clocktest.New()
		cfg := b.config(t)
		cfg.Now = clock.Now
		h := setup(t, cfg)
		ids := map[string]string{}
		for i := range 6 {
			cid := fmt.Sprintf("n%d", i)
			ids[cid] = entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"`+cid+`","data":{}}`)).ID
		}
		d := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"d","data":{}}`))
		h.must(t, "DELETE", "/v1/notes/"+d.ID, "alice", newKey(), "")

		p1 := pageOf(t, h.must(t, "GET", "/v1/changes?limit=2", "alice", "", ""))
		if len(p1.Changes) != 2 || !p1.HasMore {
			t.Fatalf("first page: %+v", p1)
		}
		if n := sweepAll(t, h, clock); n != 1 {
			t.Fatalf("swept %d, want 1", n)
		}
		r := h.must(t, "GET", "/v1/changes?limit=2&after="+p1.Cursor, "alice", "", "")
		if r.status != http.StatusOK {
			t.Fatalf("the read's second page after the sweep of a tombstone from before it: %d %s", r.status, r.body)
		}
		p2 := pageOf(t, r)
		if len(p2.Changes) != 2 || !p2.HasMore || p2.Changes[0].ClientID != "n2" {
			t.Fatalf("second page: %+v", p2)
		}
		// n0, read on the first page, is deleted and swept: the read
		// must start again.
		h.must(t, "DELETE", "/v1/notes/"+ids["n0"], "alice", newKey(), "")
		if n := sweepAll(t, h, clock); n != 1 {
			t.Fatalf("swept %d, want 1", n)
		}
		if r := h.must(t, "GET", "/v1/changes?limit=2&after="+p2.Cursor, "alice", "", ""); r.status != http.StatusGone || codeOf(t, r) != CodeCursorExpired {
			t.Fatalf("a read that missed the tombstone of a record it holds: %d %s, want 410", r.status, r.body)
		}
	})
}

// TestCursorZeroExpires (issue 25, 8): "0" is a cursor like any other. A
// device that read an empty account holds "0"; once a tombstone it never
// saw is swept, "0" answers 410. No cursor (after absent or empty) is
// the beginning and never expires.
func TestCursorZeroExpires(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := clocktest.New()
		cfg := b.config(t)
		cfg.Now = clock.Now
		h := setup(t, cfg)
		_, cursor := h.readAll(t, "alice", "", 100)
		if cursor != "0" {
			t.Fatalf("the cursor of an empty account: %q, want \"0\"", cursor)
		}
		x := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"x","data":{}}`))
		h.must(t, "DELETE", "/v1/notes/"+x.ID, "alice", newKey(), "")
		if p := pageOf(t, h.must(t, "GET", "/v1/changes?after=0", "alice", "", "")); len(p.Changes) != 1 || !p.Changes[0].Deleted {
			t.Fatalf("after=0 before the sweep: %+v", p)
		}
		if n := sweepAll(t, h, clock); n != 1 {
			t.Fatalf("swept %d, want 1", n)
		}
		if r := h.must(t, "GET", "/v1/changes?after=0", "alice", "", ""); r.status != http.StatusGone || codeOf(t, r) != CodeCursorExpired {
			t.Fatalf("after=0 past a swept tombstone: %d %s, want 410", r.status, r.body)
		}
		for _, q := range []string{"", "?after="} {
			if p := pageOf(t, h.must(t, "GET", "/v1/changes"+q, "alice", "", "")); len(p.Changes) != 0 || p.Cursor == "0" || p.HasMore {
				t.Fatalf("no cursor %q: %+v, want an empty page at the head", q, p)
			}
		}
	})
}

// TestChangesOneSnapshot (issue 25, 11): on PostgreSQL the actor's
// horizon, head and rows are read in one snapshot. A sweep placed
// between the horizon's read and the rows' (Config.TestHookChangesRead)
// does not make the page skip a tombstone for good: the page holds it
// (read before the sweep), or the cursor expires. Before, the horizon
// was read in one statement and the rows in another, and the page ended
// past the swept tombstone at a cursor the server accepted. (On bbolt a
// read is one View transaction: nothing can run between its reads.)
func TestChangesOneSnapshot(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	cfg := Config{PostgresDSN: idempotencytest.PostgresDSN(t), Now: clock.Now}
	var (
		h     *harness
		armed atomic.Bool
	)
	cfg.TestHookChangesRead = func(ctx context.Context) {
		if armed.CompareAndSwap(true, false) {
			if n, err := h.srv.SweepTombstones(ctx); err != nil || n != 1 {
				t.Errorf("the sweep between the reads: %d %v, want 1 swept", n, err)
			}
		}
	}
	h = setup(t, cfg)
	h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"a","data":{}}`)
	_, cursor := h.readAll(t, "alice", "", 100)
	b := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"b","data":{}}`))
	h.must(t, "DELETE", "/v1/notes/"+b.ID, "alice", newKey(), "")
	h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":{}}`)

	clock.Advance(DefaultTombstoneRetention + time.Second)
	armed.Store(true)
	r := h.must(t, "GET", "/v1/changes?after="+cursor, "alice", "", "")
	if armed.Load() {
		t.Fatal("the hook did not run")
	}
	if r.status == http.StatusGone {
		return
	}
	p := pageOf(t, r)
	seen := map[string]bool{}
	for _, c := range p.Changes {
		seen[c.ClientID] = c.Deleted
	}
	if deleted, ok := seen["b"]; !ok || !deleted {
		t.Fatalf("the page skipped b's tombstone, swept during the read: %+v", p)
	}
}
