package queue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/clocktest"
	bolt "go.etcd.io/bbolt"
)

// The upgrade from schema 5 under attack: a process killed at random
// moments of it, and at chosen writes of its commit (upgrade_crash_test),
// and a disk that fills during it (upgrade_diskfull_linux_test.go). Each
// compares what the public API shows after the attack with what an
// uninterrupted upgrade of the same file shows.

var (
	upgradeEntities = flag.Int("upgrade.entities", 2000, "entities in the schema-5 file of the upgrade attacks")
	upgradeKills    = flag.Int("upgrade.kills", 3, "random-moment kills of TestUpgradeKilled")
	upgradeSeed     = flag.Uint64("upgrade.seed", 0, "seed of the upgrade attacks (0: from the time, printed)")
)

// upgradeChildEnv names the schema-5 file the child of the upgrade
// attacks opens (upgradeChild).
const upgradeChildEnv = "SYNCD_QUEUE_UPGRADE_CHILD"

// upgradeNow is the clock of every open of the upgraded file: Open's
// recovery stamps its events and next attempts with it, so the child, the
// reopen after it and the reference agree.
var upgradeNow = clocktest.Start.Add(30 * 24 * time.Hour)

// upgradeChild is the child half of the upgrade attacks: when the test
// binary runs with upgradeChildEnv set, it opens that file (upgrading
// it) on one OS thread, so every write of the upgrade comes from one
// thread (strace counts a thread's calls), then closes it. It prints
// "open" before Open and "opened", "closed" after.
func upgradeChild() bool {
	path := os.Getenv(upgradeChildEnv)
	if path == "" {
		return false
	}
	runtime.LockOSThread()
	fmt.Println("open")
	s, err := Open(path, Config{Now: func() time.Time { return upgradeNow }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	fmt.Println("opened")
	if err := s.Close(); err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	fmt.Println("closed")
	return true
}

// buildSchema5 writes at path, with today's code, a store of n entities
// in three accounts with operations in every state, sent, answered,
// merged, swept, a session and a purge cut short, closes it, and rewrites
// it in schema 5's layout (downgradeToSchema5). It returns the events as
// the store read them before the rewrite.
func buildSchema5(t testing.TB, path string, n int, seed uint64) []Event {
	t.Helper()
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(seed, 5))
	clock := clocktest.New()
	s, err := Open(path, Config{NoSync: true, Now: clock.Now, MergeableTypes: []string{"draft"}, EventHistory: 3 * n})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AddApp(ctx, App{Name: "notes", Types: []string{"note", "draft"}, TokenDigest: strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	accounts := []string{"alice", "bob", "carol"}
	type ent struct{ account, typ, id string }
	ents := make([]ent, n)
	for i := range ents {
		typ := "note"
		if i%5 == 0 {
			typ = "draft"
		}
		ents[i] = ent{accounts[i%3], typ, fmt.Sprintf("e%06d", i)}
	}
	apply := func(ws []Write) {
		t.Helper()
		for len(ws) > 0 {
			k := min(len(ws), 200)
			if _, err := s.ApplyBatch(ctx, ws[:k], false); err != nil {
				t.Fatal(err)
			}
			ws = ws[k:]
			clock.Advance(time.Second)
		}
	}
	var ws []Write
	for i, e := range ents {
		w := Write{Op: OpCreate, AccountID: e.account, EntityType: e.typ, EntityID: e.id, OperationID: "c-" + e.id,
			Data: json.RawMessage(fmt.Sprintf(`{"title":"t%d","n":%d}`, i, rnd.IntN(1000)))}
		if i%4 == 0 {
			w.App = "notes"
		}
		ws = append(ws, w)
	}
	apply(ws)
	// Send and answer a share of the creates of alice and bob.
	answer := func(account string, k int) {
		t.Helper()
		for range k {
			op, err := s.Claim(ctx, account, "w", time.Minute)
			if errors.Is(err, ErrNoReady) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch r := rnd.IntN(20); {
			case r < 15:
				_, err = s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID})
			case r < 17:
				err = s.RetryAt(ctx, op.ID, "w", clock.Now().Add(time.Hour), "network", "reset", true)
			case r < 18:
				err = s.Decline(ctx, op.ID, "w", "validation", "no")
			case r < 19:
				err = s.Fail(ctx, op.ID, "w", "server", "gone", true)
			default:
				// left sending: Open's recovery returns it
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	answer("alice", n/4)
	answer("bob", n/5)
	// Updates, deletes, merged drafts.
	ws = ws[:0]
	for _, e := range ents {
		switch r := rnd.IntN(10); {
		case r < 4:
			for j := range 1 + rnd.IntN(3) {
				ws = append(ws, Write{Op: OpUpdate, AccountID: e.account, EntityType: e.typ, EntityID: e.id,
					Data: json.RawMessage(fmt.Sprintf(`{"title":"u%d"}`, j))})
			}
		case r < 5:
			ws = append(ws, Write{Op: OpDelete, AccountID: e.account, EntityType: e.typ, EntityID: e.id})
		}
	}
	apply(ws)
	answer("alice", n/10)
	answer("bob", n/20)
	clock.Advance(8 * 24 * time.Hour)
	if _, _, err := s.Sweep(ctx); err != nil { // done ops and the oldest events go
		t.Fatal(err)
	}
	answer("alice", 50)
	if _, err := s.AppendEvent(ctx, Event{Type: "connectivity.changed", Data: json.RawMessage(`{"online":false}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSession(ctx, &Session{AccountID: "alice", AccessToken: "alice.token"}, Event{Type: "session.changed"}); err != nil {
		t.Fatal(err)
	}
	// A purge of carol that a crash cut short: Open finishes it after the
	// upgrade.
	if _, err := s.StartPurge(ctx, "carol", true); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s)
	events, _, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// An odd seed leaves the file as a schema-5 process killed after a
	// commit did: no free list on disk, so the upgrade's Open rebuilds it
	// from the trees before it allocates pages.
	downgradeToSchema5(t, path, seed%2 == 1)
	return events
}

// downgradeToSchema5 rewrites the closed data file at path in the layout
// schema 5 wrote: each event in a row of its own, a partition's
// unfinished operations under keys of the partitions bucket instead of
// in the entity's row, schema 5. With noFreelist its commit leaves no
// free list in the file. TestSchema5Downgrade checks it against
// the file schema 5's code wrote.
func downgradeToSchema5(t testing.TB, path string, noFreelist bool) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: noFreelist})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		evb := tx.Bucket(bucketEvents)
		var split []Event
		var groups [][]byte
		if err := evb.ForEach(func(k, v []byte) error {
			if v[0] != rowGroup {
				return nil
			}
			groups = append(groups, bytes.Clone(k))
			return decodeEvents(readU64(k), v, func(e Event) error { split = append(split, e); return nil })
		}); err != nil {
			return err
		}
		for _, k := range groups {
			if err := evb.Delete(k); err != nil {
				return err
			}
		}
		for i := range split {
			if err := evb.Put(u64(split[i].Seq), encodeEvent(&split[i])); err != nil {
				return err
			}
		}

		ents := tx.Bucket(bucketEntities)
		parts, err := tx.CreateBucket(bucketPartitionsV5)
		if err != nil {
			return err
		}
		type row struct{ k, v []byte }
		var rows []row
		if err := ents.ForEach(func(k, v []byte) error {
			if v[0] != rowV1 {
				return nil
			}
			_, _, list, tail, err := entityRowParts(v)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				return nil
			}
			for _, seq := range list {
				pk := append(append(bytes.Clone(k), 0), u64(seq)...)
				if err := parts.Put(pk, nil); err != nil {
					return err
				}
			}
			rows = append(rows, row{bytes.Clone(k), withUnfinished(v, tail, nil)})
			return nil
		}); err != nil {
			return err
		}
		for _, r := range rows {
			if err := ents.Put(r.k, r.v); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64(5))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fileRows reads every key and value of the bbolt file at path, nested
// buckets included, as bucket path → key → value.
func fileRows(t testing.TB, path string) map[string]map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]map[string]string{}
	var walk func(name string, b *bolt.Bucket) error
	walk = func(name string, b *bolt.Bucket) error {
		m := map[string]string{}
		out[name] = m
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return walk(name+"/"+string(k), b.Bucket(k))
			}
			m[string(k)] = string(v)
			return nil
		})
	}
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(string(name), b) })
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// fileSchema reads the schema number of the file at path without
// upgrading it.
func fileSchema(t testing.TB, path string) uint64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v uint64
	db.View(func(tx *bolt.Tx) error { v = readU64(tx.Bucket(bucketMeta).Get(metaSchema)); return nil })
	return v
}

// The downgrade the upgrade attacks build their files with is exact: the
// file schema 5's code wrote (testdata/schema5.db.gz), upgraded by
// today's code, downgraded, holds every key and value it held.
func TestSchema5Downgrade(t *testing.T) {
	path, _ := openFixture(t, "schema5")
	before := fileRows(t, path)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := (&Store{}).initBuckets(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, ok := fileRows(t, path)[string(bucketPartitionsV5)]; ok || fileSchema(t, path) != schemaVersion {
		t.Fatal("the fixture was not upgraded")
	}
	downgradeToSchema5(t, path, false)
	after := fileRows(t, path)
	for b, rows := range before {
		for k, v := range rows {
			if got, ok := after[b][k]; !ok || got != v {
				t.Errorf("bucket %s key %q: %x after the round trip, %x before", b, k, got, v)
			}
		}
		for k := range after[b] {
			if _, ok := rows[k]; !ok {
				t.Errorf("bucket %s key %q is new", b, k)
			}
		}
	}
	for b := range after {
		if _, ok := before[b]; !ok {
			t.Errorf("bucket %s is new", b)
		}
	}
}

// upgradeView is what the public API shows of a store, for comparing an
// attacked upgrade with an uninterrupted one: every operation, the
// pending ones in the order listed, every entity row, the change log,
// the counts, the session, and the order in which claims then take the
// first upgradeClaims queued operations of each account.
type upgradeView struct {
	Operations []Operation
	Pending    []Operation
	Entities   []Entity
	Events     []Event
	Pages      [][]Event // Events(since, 50) from 16 places in the log
	Oldest     uint64
	Last       uint64
	Counts     map[State]int
	Types      []map[State]int
	Apps       map[string]map[State]int
	Session    *Session
	Purging    []string
	Claims     map[string][]string
}

// upgradeClaims bounds the claims of a view, each a transaction.
const upgradeClaims = 100

// viewUpgraded opens the file at path (upgrading it if it is still
// schema 5), checks it, and reads its view; the claims drain it.
func viewUpgraded(t testing.TB, path string) upgradeView {
	t.Helper()
	ctx := context.Background()
	clock := clocktest.At(upgradeNow)
	s, err := Open(path, Config{Now: clock.Now, NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open after the attack: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("Check after the attack: %v", err)
	}
	if v := fileSchema0(s); v != schemaVersion {
		t.Fatalf("schema %d after Open", v)
	}
	var v upgradeView
	page := func(opts ListOptions) []Operation {
		var all []Operation
		opts.Limit = MaxListLimit
		for {
			items, next, err := s.ListOperations(opts)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, items...)
			if next == "" {
				return all
			}
			opts.After = next
		}
	}
	v.Operations = page(ListOptions{})
	v.Pending = page(ListOptions{State: StatePending})
	for _, a := range []string{"alice", "bob", "carol"} {
		for _, typ := range []string{"note", "draft"} {
			opts := ListOptions{Limit: MaxListLimit}
			for {
				items, next, err := s.ListEntities(a, typ, opts)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range items {
					row, err := s.EntityRow(a, typ, e.ID)
					if err != nil {
						t.Fatal(err)
					}
					v.Entities = append(v.Entities, e, row)
				}
				if next == "" {
					break
				}
				opts.After = next
			}
		}
		_, types, err := s.TypeCounts(a, []string{"note", "draft"})
		if err != nil {
			t.Fatal(err)
		}
		v.Types = append(v.Types, types)
	}
	if v.Events, v.Oldest, err = s.Events(0, 0); err != nil {
		t.Fatal(err)
	}
	if v.Last, err = s.LastEventSeq(); err != nil {
		t.Fatal(err)
	}
	// Reads of the log from inside it, in pages.
	for i := range 16 {
		since := v.Last * uint64(i) / 16
		page, _, err := s.Events(since, 50)
		if err != nil {
			t.Fatal(err)
		}
		v.Pages = append(v.Pages, page)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	v.Counts = st.Counts
	if v.Apps, err = s.AppCounts(); err != nil {
		t.Fatal(err)
	}
	if v.Session, err = s.LoadSession(); err != nil {
		t.Fatal(err)
	}
	s.db.View(func(tx *bolt.Tx) error { v.Purging = purgesInProgress(tx); return nil })
	clock.Advance(48 * time.Hour) // past every retry
	v.Claims = map[string][]string{}
	for _, a := range []string{"alice", "bob", "carol"} {
		for range upgradeClaims {
			op, err := s.Claim(ctx, a, "w", time.Minute)
			if errors.Is(err, ErrNoReady) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			v.Claims[a] = append(v.Claims[a], op.ID)
			if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check after draining: %v", err)
	}
	return v
}

func fileSchema0(s *Store) uint64 {
	var v uint64
	s.db.View(func(tx *bolt.Tx) error { v = readU64(tx.Bucket(bucketMeta).Get(metaSchema)); return nil })
	return v
}

// sameView fails t with the first difference between two views.
func sameView(t testing.TB, what string, got, want upgradeView) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if bytes.Equal(g, w) {
		return
	}
	i := 0
	for i < len(g) && i < len(w) && g[i] == w[i] {
		i++
	}
	from := max(0, i-200)
	t.Fatalf("%s: the store differs from the uninterrupted upgrade's at byte %d:\n got …%s…\nwant …%s…", what, i, g[from:min(len(g), i+200)], w[from:min(len(w), i+200)])
}

// upgradeFixture is the schema-5 file of the upgrade attacks, in a
// directory of the test's, and the view of its uninterrupted upgrade.
type upgradeFixture struct {
	dir, schema5 string
	want         upgradeView
	took         time.Duration // the uninterrupted upgrade's Open
	seed         uint64
}

// upgradeBuilt holds the file the first upgrade attack built, for the
// others: building it and upgrading the reference takes seconds (tens
// under -race).
var upgradeBuilt struct {
	once sync.Once
	ok   bool
	file []byte
	want upgradeView
	took time.Duration
	seed uint64
}

// newUpgradeFixture copies the schema-5 file of the upgrade attacks,
// built by the first test that asks, into the test's directory.
func newUpgradeFixture(t *testing.T) *upgradeFixture {
	t.Helper()
	b := &upgradeBuilt
	b.once.Do(func() {
		seed := *upgradeSeed
		if seed == 0 {
			seed = uint64(time.Now().UnixNano())
		}
		t.Logf("seed %d (rerun with -upgrade.seed=%d), %d entities", seed, seed, *upgradeEntities)
		dir := t.TempDir()
		path := filepath.Join(dir, "schema5.db")
		start := time.Now()
		old := buildSchema5(t, path, *upgradeEntities, seed)
		file, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := readFileMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("schema-5 file: %d bytes, %d events, free list on disk %v, built in %v", len(file), len(old), m.freelistKnown, time.Since(start))

		ref := filepath.Join(dir, "reference.db")
		if err := copyFile(path, ref); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		s, err := Open(ref, Config{Now: func() time.Time { return upgradeNow }, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		s.Close()
		want := viewUpgraded(t, ref)
		t.Logf("the uninterrupted upgrade's Open took %v", took)
		// The upgrade keeps the old events as they were.
		if len(want.Events) < len(old) {
			t.Fatalf("%d events after the upgrade, %d before", len(want.Events), len(old))
		}
		sameJSON(t, "events kept by the upgrade", want.Events[:len(old)], old)
		if len(want.Purging) != 0 || len(want.Claims["alice"]) == 0 {
			t.Fatalf("reference: purges %v, %d claims of alice", want.Purging, len(want.Claims["alice"]))
		}
		b.ok, b.file, b.want, b.took, b.seed = !t.Failed(), file, want, took, seed
	})
	if !b.ok {
		t.Fatal("building the schema-5 file failed in an earlier test")
	}
	t.Logf("seed %d (rerun with -upgrade.seed=%d)", b.seed, b.seed)
	f := &upgradeFixture{dir: t.TempDir(), want: b.want, took: b.took, seed: b.seed}
	f.schema5 = filepath.Join(f.dir, "schema5.db")
	if err := os.WriteFile(f.schema5, b.file, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *upgradeFixture) copyTo(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(f.dir, name)
	if err := copyFile(f.schema5, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// runUpgradeChild starts the child on path, through the command prefix
// (strace) if any; kill, if set, is called once the child says it
// opens, and gets the child's process. It returns the child's last line
// and its error.
func runUpgradeChild(t testing.TB, path string, prefix []string, kill func(*os.Process)) (last string, err error) {
	t.Helper()
	args := append(prefix, os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), upgradeChildEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		last = sc.Text()
		if strings.HasPrefix(last, "error:") {
			t.Fatalf("child: %s", last)
		}
		if last == "open" && kill != nil {
			kill(cmd.Process)
		}
	}
	err = cmd.Wait()
	// A child that closed the store and then failed; one killed between
	// its last line and its exit is fine.
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); err != nil && last == "closed" && !(ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
		t.Fatalf("child: %v: %s", err, stderr.Bytes())
	}
	return last, err
}

// pwriteOffset reads the offset of a pwrite64 call strace printed.
// strace splits a call that another thread's event interrupts: its
// first line ends "<unfinished ...>" and a "<... pwrite64 resumed>" line
// follows.
var pwriteOffset = regexp.MustCompile(`pwrite64\(.*, \d+, (\d+)(\) += | <unfinished \.\.\.>)`)

// A process SIGKILLed at random moments of the upgrade from schema 5
// (Open's one transaction, the purge it then finishes, Close) leaves a
// file that opens, passes Check, and shows through the public API
// exactly what an uninterrupted upgrade of the same file shows: every
// operation and entity, the change log, the counts, the order of the
// queue. Kill moments are drawn from the seed, spread over the time the
// uninterrupted upgrade took.
func TestUpgradeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns subprocesses; run without -short")
	}
	f := newUpgradeFixture(t)
	rnd := rand.New(rand.NewPCG(f.seed, 6))
	// Spread the kills over the upgrade's time after the child says it
	// opens (a loaded machine stretches it: some kills land later).
	var schema5, schema6, finished int
	for round := range *upgradeKills {
		path := f.copyTo(t, fmt.Sprintf("kill%d.db", round))
		delay := time.Duration(rnd.Int64N(int64(f.took) + 1))
		last, err := runUpgradeChild(t, path, nil, func(p *os.Process) {
			time.Sleep(delay) // where the kill lands; any moment must do
			p.Signal(syscall.SIGKILL)
		})
		v := fileSchema(t, path)
		switch {
		case last == "closed":
			finished++
		case v == 5:
			schema5++
		default:
			schema6++
		}
		t.Logf("round %d: killed %v after \"open\" (last line %q, %v): schema %d", round, delay, last, err, v)
		if v != 5 && v != schemaVersion {
			t.Fatalf("round %d: schema %d after the kill", round, v)
		}
		sameView(t, fmt.Sprintf("round %d (seed %d, kill after %v)", round, f.seed, delay), viewUpgraded(t, path), f.want)
	}
	t.Logf("killed %d times before the upgrade committed, %d after, %d runs finished first", schema5, schema6, finished)
}

// The same, killed at chosen writes of the child: strace delivers SIGKILL
// when the child's one thread calls pwrite64 for the Nth time (each page
// of a commit is a pwrite64, the meta page the last one, so N = 1 is the
// first page of the upgrade's commit and N = the count of its pages + 1
// its meta page). The kill points: the first few writes, the last few
// around the meta page, and writes drawn from the seed.
func TestUpgradeKilledAtWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns subprocesses; run without -short")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed")
	}
	if out, err := exec.Command(strace, "-f", "-qq", "-o", os.DevNull, "true").CombinedOutput(); err != nil {
		t.Skipf("strace cannot trace here (ptrace not allowed?): %v: %s", err, out)
	}
	f := newUpgradeFixture(t)
	// Count the child's writes: its upgrade commit, then its purge's and
	// Close's.
	count := f.copyTo(t, "count.db")
	log := filepath.Join(f.dir, "strace.log")
	if last, err := runUpgradeChild(t, count, []string{strace, "-f", "-qq", "-e", "trace=pwrite64", "-o", log}, nil); last != "closed" {
		t.Fatalf("child under strace: %q, %v", last, err)
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "pwrite64(") {
			lines = append(lines, line)
		}
	}
	writes := len(lines)
	t.Logf("the child's upgrade, purge and close made %d pwrite64 calls", writes)
	if writes < 10 {
		t.Fatalf("only %d writes: %s", writes, raw)
	}
	// The first commit's meta page: the first write to page 0 or 1.
	meta := 0
	for i, line := range lines {
		m := pwriteOffset.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("strace line %q", line)
		}
		if off, _ := strconv.ParseInt(m[1], 10, 64); off < 2*int64(os.Getpagesize()) {
			meta = i + 1
			break
		}
	}
	if meta == 0 {
		t.Fatalf("no write of a meta page in %d writes", writes)
	}
	t.Logf("the upgrade's commit: %d page writes, then its meta page (write %d)", meta-1, meta)
	rnd := rand.New(rand.NewPCG(f.seed, 7))
	points := []int{1, 2, meta - 1, meta, meta + 1, writes}
	for range *upgradeKills {
		points = append(points, 1+rnd.IntN(writes))
	}
	tried := map[int]bool{}
	for _, n := range points {
		if n < 1 || n > writes || tried[n] {
			continue
		}
		tried[n] = true
		path := f.copyTo(t, fmt.Sprintf("write%d.db", n))
		last, err := runUpgradeChild(t, path, []string{strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=pwrite64",
			"-e", fmt.Sprintf("inject=pwrite64:signal=KILL:when=%d", n)}, nil)
		v := fileSchema(t, path)
		t.Logf("killed at write %d of %d: last line %q (%v), schema %d", n, writes, last, err, v)
		if last == "closed" && n <= meta+1 {
			// The upgrade's commit writes the same pages every time; the
			// later commits (the purge's, Close's) may write fewer.
			t.Fatalf("write %d: the child was not killed", n)
		}
		if n < meta && v != 5 || n > meta && v != schemaVersion {
			t.Errorf("killed at write %d (the meta page is write %d): schema %d", n, meta, v)
		}
		sameView(t, fmt.Sprintf("killed at write %d (seed %d)", n, f.seed), viewUpgraded(t, path), f.want)
	}
}
