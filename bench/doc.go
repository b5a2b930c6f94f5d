// Package bench sets syncd's local API against the store an app might
// use instead of it: an in-process SQLite outbox (modernc.org/sqlite,
// pure Go; WAL, synchronous=FULL), where an app writes its record and
// the operation to send in one transaction. Its benchmarks run syncd's
// real API (localapi, daemon and queue on an fsyncing bbolt file,
// loopback HTTP, as localapitest starts it) and the SQLite outbox on the
// same disk, with the same data, in alternating rounds, and report both
// rates and their ratio in one run (issue 28's "SQLite outbox peer"
// rows; docs/localapi.md has the figures).
//
// It is a module of its own (go.mod beside this file, with syncd
// replaced by the directory above) so that SQLite and its C-to-Go
// translation of libc never enter syncd's module graph: backends that
// import the idempotency gate library (github.com/syncd/syncd/idempotency
// and its stores) would otherwise see them in their go.sum and their
// dependency audits. Nothing in syncd imports this package; it holds
// only benchmarks. CI runs each once (.ci/run) so it keeps compiling:
//
//	cd bench && go test -run . -bench . -benchtime 1x ./...
//
// For figures, run longer, e.g.
//
//	cd bench && go test -run '^$' -bench . -benchtime 2000x -count 3
package bench
