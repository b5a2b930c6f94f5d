package queue

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// How full a tree's pages are split.
//
// bbolt splits a page that outgrows its size where the tree's FillPercent
// says: at half a page by default. That suits keys that land anywhere
// (both halves take later inserts), but a tree whose keys arrive in order
// keeps only the right half growing and is left half empty. The trees of
// appendOrdered always grow at their end and are split full. Three more
// grow at their end most of the time but not always:
//
//   - entities, keyed by account, type and id: the ids syncd makes when
//     the app names none are UUIDv7, in time order, so a type's new
//     entities land at the end of the type's run of keys, which is the
//     end of the tree when the account and type sort last; an app's own
//     ids land anywhere;
//   - op_ids, keyed by operation id: syncd's are UUIDv7 too; an app's
//     Idempotency-Keys land anywhere;
//   - ready (per account), keyed by next attempt and seq: a create lands
//     at the end, a retry a jittered time ahead, a released head earlier.
//
// A transaction that puts keys in one of these only at the end of the
// tree (no greater key in it) splits that tree's pages full; one that
// puts a key anywhere else splits at half, as bbolt does by default.
//
// The end of an entity type's run is not enough: unless the tree ends
// there, the page it is on usually holds the next run's first keys, and
// a full split of that page for each append keeps it full and moves the
// page's last key to a page of its own, which nothing appends to. Types
// (or accounts) filled one after the other in descending order, 120 of
// 17 entities each, left 3 entities a page against bbolt's default 17
// (TestFillRunsInReverse); 200 accounts creating in turn, 9 a page
// against 15. Judged at the end of the tree, a second type's appends
// split at half, as before: two types filled one after the other, 13
// entities a page (17.5 at the end of each run, 10 at half).
//
// Splitting full for every transaction would leave a page that later
// takes a key in its middle to split into a full page and a nearly
// empty one on each such insert: after an outage that put every head
// of a full ready index back a jittered time ahead, 18 keys a page
// against bbolt's default 85 (TestFillAfterRetries; a fill of 0.9
// throughout took 1.9 times the default's pages). Here a page filled
// full by appends that takes a middle key later splits in halves, as
// any page does: 81 keys a page.
//
// BenchmarkFootprint, a queue of 100,000 small creates whose ids syncd
// made: 798 bytes a create in the queue's trees with these three split
// at half, 447 now (807 and 485 for creates made one a transaction).
// Sent as they are made, the entities keep 16 rows a page where they kept
// 8 (TestFillWhileSending). A queue filled offline and sent afterwards
// ends with its entities' pages about half full, as before: each
// completion rewrites its row a little longer, and the first to land in
// a full page splits it in halves (20,000 creates: 2,222 leaf pages
// against 2,000 before, the queue's trees 697 bytes a create against
// 717).

// fills is a write transaction's fillTrack per tree, shared by the
// writes it commits.
type fills map[*bolt.Bucket]fillTrack

// fillTrack is what a transaction put in one of these trees so far.
type fillTrack struct {
	mixed bool // a key landed other than at the end: split at half
}

// trackFill registers b, one of the trees above, for this transaction's
// puts.
func (w *txw) trackFill(b *bolt.Bucket) {
	if w.fill == nil { // a transaction that does not track: bbolt's default
		return
	}
	if _, ok := w.fill[b]; !ok {
		w.fill[b] = fillTrack{}
	}
}

// noteFill sets b's fill for a put of k: full while every key put in it
// by this transaction went at the end of the tree, half from the first
// that did not.
func (w *txw) noteFill(b *bolt.Bucket, k []byte) {
	t, ok := w.fill[b]
	if !ok || t.mixed {
		return
	}
	if atEnd(b, k) {
		b.FillPercent = 1
		return
	}
	b.FillPercent = bolt.DefaultFillPercent
	t.mixed = true
	w.fill[b] = t
}

// atEnd reports whether b holds no key greater than k.
func atEnd(b *bolt.Bucket, k []byte) bool {
	c := b.Cursor()
	next, _ := c.Seek(k)
	if next != nil && bytes.Equal(next, k) {
		next, _ = c.Next()
	}
	return next == nil
}
