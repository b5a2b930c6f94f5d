package bench

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/localapi/localapitest"
	_ "modernc.org/sqlite"
)

// outbox is the SQLite peer: an app's own store with an outbox, in
// process. A write is the entity's row and its operation's row in one
// transaction.
type outbox struct {
	db  *sql.DB
	ent *sql.Stmt
	op  *sql.Stmt
}

const outboxSchema = `
CREATE TABLE entities (
	account    TEXT NOT NULL,
	type       TEXT NOT NULL,
	id         TEXT NOT NULL,
	data       BLOB NOT NULL,
	version    INTEGER NOT NULL,
	sync_state TEXT NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (account, type, id)
);
CREATE TABLE operations (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT NOT NULL UNIQUE,
	account    TEXT NOT NULL,
	type       TEXT NOT NULL,
	entity_id  TEXT NOT NULL,
	op         TEXT NOT NULL,
	payload    BLOB NOT NULL,
	state      TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX operations_ready ON operations (account, state, seq);
`

// openOutbox opens a new outbox database in dir: WAL, synchronous=FULL
// (every commit fsyncs the log, as syncd's every commit fsyncs its
// file), one connection (one writer, as an app's store has).
func openOutbox(b testing.TB, dir string) *outbox {
	b.Helper()
	dsn := "file:" + filepath.Join(dir, "outbox.db") + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	var mode string
	var sync int
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		b.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		b.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		b.Fatalf("sqlite: journal_mode %q synchronous %d, want wal and 2 (FULL)", mode, sync)
	}
	if _, err := db.Exec(outboxSchema); err != nil {
		b.Fatal(err)
	}
	o := &outbox{db: db}
	if o.ent, err = db.Prepare(`INSERT INTO entities (account, type, id, data, version, sync_state, updated_at) VALUES (?, ?, ?, ?, 0, 'pending', ?)`); err != nil {
		b.Fatal(err)
	}
	if o.op, err = db.Prepare(`INSERT INTO operations (id, account, type, entity_id, op, payload, state, created_at) VALUES (?, ?, ?, ?, 'create', ?, 'pending', ?)`); err != nil {
		b.Fatal(err)
	}
	return o
}

// create writes rows creates (entity and operation each) in one
// transaction.
func (o *outbox) create(datas []string) error {
	tx, err := o.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ent, op := tx.Stmt(o.ent), tx.Stmt(o.op)
	now := time.Now().UnixNano()
	for _, d := range datas {
		id := uuid.NewString()
		if _, err := ent.Exec("alice", "note", id, d, now); err != nil {
			return err
		}
		if _, err := op.Exec(uuid.NewString(), "alice", "note", id, d, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// api is syncd's local API as an app reaches it: a real daemon and queue
// on an fsyncing bbolt file, signed in, served on loopback.
type api struct {
	e  *localapitest.Env
	hc *http.Client
}

func startAPI(b *testing.B) *api {
	e := localapitest.Start(b, localapitest.Options{Account: "alice", Durable: true})
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	b.Cleanup(tr.CloseIdleConnections)
	return &api{e: e, hc: &http.Client{Transport: tr}}
}

func (a *api) post(path, body string, want int) error {
	req, err := http.NewRequest("POST", a.e.URL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+localapitest.Token)
	req.Header.Set("Content-Type", "application/json")
	res, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body) // so the connection is reused
	res.Body.Close()
	if res.StatusCode != want {
		return fmt.Errorf("POST %s: status %d", path, res.StatusCode)
	}
	return err
}

// data is record i, as the other benchmarks of creates write it.
func data(i int) string {
	return fmt.Sprintf(`{"title":"note %d","body":"%s","done":false}`, i, strings.Repeat("x", 64))
}

// sideBySide runs rounds of n records through syncd then SQLite until
// at least total records went through each, and reports both rates and
// syncd's over SQLite's.
func sideBySide(b *testing.B, total, round int, syncd, sqlite func(from, n int) error) {
	var syncdDur, sqliteDur time.Duration
	done := 0
	b.ResetTimer()
	for next := 0; done < total; done += round {
		began := time.Now()
		if err := syncd(next, round); err != nil {
			b.Fatal(err)
		}
		syncdDur += time.Since(began)
		next += round
		began = time.Now()
		if err := sqlite(next, round); err != nil {
			b.Fatal(err)
		}
		sqliteDur += time.Since(began)
		next += round
	}
	b.StopTimer()
	s, q := float64(done)/syncdDur.Seconds(), float64(done)/sqliteDur.Seconds()
	b.ReportMetric(s, "syncd_creates/s")
	b.ReportMetric(q, "sqlite_creates/s")
	b.ReportMetric(s/q, "ratio")
}

// BenchmarkImportVsSQLite is one client importing records: syncd's POST
// /v1/batch of 100 creates (each with its idempotency key, as an
// importer that may retry sends them) against the SQLite outbox at 100
// records a transaction. b.N is the records each side writes (at least
// 1,000), in alternating rounds of 1,000. ratio is syncd's rate over
// SQLite's (issue 28's target: at least 1.0).
func BenchmarkImportVsSQLite(b *testing.B) {
	const per, round = 100, 1000
	a := startAPI(b)
	o := openOutbox(b, b.TempDir())
	sideBySide(b, max(b.N, round), round,
		func(from, n int) error {
			for start := from; start < from+n; start += per {
				ws := make([]string, 0, per)
				for i := start; i < start+per; i++ {
					ws = append(ws, fmt.Sprintf(`{"op":"create","type":"note","data":%s,"idempotencyKey":"import-%d"}`, data(i), i))
				}
				if err := a.post("/v1/batch", `{"writes":[`+strings.Join(ws, ",")+`]}`, http.StatusOK); err != nil {
					return err
				}
			}
			return nil
		},
		func(from, n int) error {
			for start := from; start < from+n; start += per {
				ds := make([]string, 0, per)
				for i := start; i < start+per; i++ {
					ds = append(ds, data(i))
				}
				if err := o.create(ds); err != nil {
					return err
				}
			}
			return nil
		})
}

// BenchmarkCreatesVsSQLite is one client making single creates: syncd's
// POST /v1/entities/note against the SQLite outbox at one record a
// transaction. b.N is the records each side writes (at least 200), in
// alternating rounds of 200. ratio is syncd's rate over SQLite's.
func BenchmarkCreatesVsSQLite(b *testing.B) {
	const round = 200
	a := startAPI(b)
	o := openOutbox(b, b.TempDir())
	sideBySide(b, max(b.N, round), round,
		func(from, n int) error {
			for i := from; i < from+n; i++ {
				if err := a.post("/v1/entities/note", `{"data":`+data(i)+`}`, http.StatusCreated); err != nil {
					return err
				}
			}
			return nil
		},
		func(from, n int) error {
			for i := from; i < from+n; i++ {
				if err := o.create([]string{data(i)}); err != nil {
					return err
				}
			}
			return nil
		})
}

// TestOutbox checks the peer writes what it claims: both rows of every
// record (openOutbox checks WAL and synchronous=FULL).
func TestOutbox(t *testing.T) {
	o := openOutbox(t, t.TempDir())
	if err := o.create([]string{data(1)}); err != nil {
		t.Fatal(err)
	}
	if err := o.create([]string{data(2), data(3)}); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"entities", "operations"} {
		var n int
		if err := o.db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 3 {
			t.Errorf("%s: %d rows, want 3", table, n)
		}
	}
}
