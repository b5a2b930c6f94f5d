package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Batched sends: a worker claims up to BatchSize ready operations of the
// session's account at once (partition heads, each as a single claim
// would take it) and sends them as one POST /v1/batch. Each operation is
// then processed exactly as a single send is (the guards before the
// send, the outcome after it), by its own goroutine: only the request is
// shared. An operation that stops before sending (the session changed,
// the age guard, an unbuildable request) leaves the batch; the batch goes
// once every operation has sent or left.
//
// Batches go only to a remote whose capabilities advertise them
// (capabilities.go), sized by the smaller of its limits and the
// daemon's: a claim takes at most min(BatchSize, maxOperations)
// operations and min(BatchBytes, maxBytes) of payload, and the requests
// are then split, by their exact size in the body, into batches of at
// most maxBytes (one too big for any batch goes alone). A remote that
// advertises no batch route gets single requests; one that advertised
// it but answers 404 for it too, for an hour.

// BatchMode says whether operations are sent in batches.
type BatchMode string

// Batch modes.
const (
	BatchAuto BatchMode = "auto" // batches when the remote advertises the route
	BatchOn   BatchMode = "on"   // the same, and a remote without it is logged as a warning
	BatchOff  BatchMode = "off"  // one request per operation
)

// Defaults of batched sends.
const (
	DefaultBatchSize  = 100
	DefaultBatchBytes = 4 << 20
	noBatchRecheck    = time.Hour
	// initialBatchWindow is how many operations a claim takes before any
	// batch was answered (batchWindow).
	initialBatchWindow = 8
)

// BatchSender sends several operations as one request; *transport.Client
// is one.
type BatchSender interface {
	SendBatch(ctx context.Context, rs []transport.Request) ([]transport.Outcome, error)
}

type collectorKey struct{}

// collector gathers the requests of one claimed batch and sends them as
// one.
type collector struct {
	d       *Daemon
	hard    context.Context
	sess    sessionSnap
	lim     batchLimits
	mu      sync.Mutex
	n       int // operations in the batch
	left    int // those that stopped without sending
	reqs    []transport.Request
	waiters []chan batchAnswer
	sentIDs map[string]bool // operations that reached their send
}

type batchAnswer struct {
	o      transport.Outcome
	single bool // no batch route: send alone
}

// send is the batch's Send for one operation: it waits for the others and
// returns this one's outcome.
func (c *collector) send(r transport.Request) (transport.Outcome, bool) {
	ch := make(chan batchAnswer, 1)
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.waiters = append(c.waiters, ch)
	c.maybeFire()
	c.mu.Unlock()
	a := <-ch
	return a.o, a.single
}

// leave records that one operation stopped before sending.
func (c *collector) leave() {
	c.mu.Lock()
	c.left++
	c.maybeFire()
	c.mu.Unlock()
}

// maybeFire sends the batch once every operation has sent or left, with
// c.mu held (the send itself runs on its own goroutine).
func (c *collector) maybeFire() {
	if len(c.reqs)+c.left != c.n || len(c.reqs) == 0 {
		return
	}
	reqs, waiters := c.reqs, c.waiters
	c.reqs, c.waiters = nil, nil
	go c.fire(reqs, waiters) // owned: ends when the batch request does
}

func (c *collector) fire(reqs []transport.Request, waiters []chan batchAnswer) {
	groups, alone := c.d.splitBatch(reqs, c.lim)
	for _, i := range alone {
		waiters[i] <- batchAnswer{single: true}
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		rs, ws := make([]transport.Request, len(g)), make([]chan batchAnswer, len(g))
		for j, i := range g {
			rs[j], ws[j] = reqs[i], waiters[i]
		}
		wg.Go(func() { c.fireOne(rs, ws) })
	}
	wg.Wait()
}

// fireOne sends one batch request.
func (c *collector) fireOne(reqs []transport.Request, waiters []chan batchAnswer) {
	d := c.d
	ctx, cancel := context.WithTimeout(c.hard, d.lease*2/3)
	defer cancel()
	unhook := context.AfterFunc(c.sess.ctx, cancel)
	defer unhook()
	d.inSend.Add(int64(len(reqs)))
	outs, err := d.batcher.SendBatch(ctx, reqs)
	d.inSend.Add(-int64(len(reqs)))
	if err == nil {
		d.batchAnswered(outs)
	}
	if err != nil {
		if errors.Is(err, transport.ErrNoBatch) {
			d.noBatch()
		} else {
			d.logger.Warn("daemon: a batch could not be sent; sending its operations one by one", "err", err)
		}
		for _, w := range waiters {
			w <- batchAnswer{single: true}
		}
		return
	}
	for i, w := range waiters {
		w <- batchAnswer{o: outs[i]}
	}
}

// splitBatch splits reqs, in order, into batches of at most lim.ops
// requests and lim.wire bytes of body (as the transport sizes them), and
// returns the indexes of each batch and of the requests to send alone:
// one too big for any batch, or left alone by the split.
func (d *Daemon) splitBatch(reqs []transport.Request, lim batchLimits) (groups [][]int, alone []int) {
	sizer, _ := d.batcher.(BatchSizer)
	var (
		cur  []int
		size int
	)
	flush := func() {
		switch len(cur) {
		case 0:
		case 1:
			alone = append(alone, cur[0])
		default:
			groups = append(groups, cur)
		}
		cur, size = nil, transport.BatchEnvelopeBytes
	}
	flush()
	for i, r := range reqs {
		b := 0
		if sizer != nil && lim.wire > 0 {
			b = sizer.BatchItemBytes(r)
			if transport.BatchEnvelopeBytes+b > lim.wire {
				alone = append(alone, i)
				continue
			}
		}
		sep := 0
		if len(cur) > 0 {
			sep = 1
		}
		if len(cur) == lim.ops || (lim.wire > 0 && size+sep+b > lim.wire) {
			flush()
			sep = 0
		}
		cur = append(cur, i)
		size += sep + b
	}
	flush()
	return groups, alone
}

// noBatch records that the remote has no batch route although it
// advertised one.
func (d *Daemon) noBatch() {
	d.batchMu.Lock()
	first := d.batchOffUntil.IsZero()
	d.batchOffUntil = d.now().Add(noBatchRecheck)
	d.batchMu.Unlock()
	if first {
		level := d.logger.Info
		if d.batchMode == BatchOn {
			level = d.logger.Warn
		}
		level("daemon: the remote answered 404 for its batch route; sending one request per operation", "recheck", noBatchRecheck)
	}
}

// batchLimits bound one batch.
type batchLimits struct {
	ops     int // operations
	payload int // bytes of the operations' payload, for the claim
	wire    int // bytes of request body (the remote's maxBytes); 0: no bound
}

// batchFor reports whether the next claim should take a batch, and how
// big: batches go only to a remote that advertises them, within its
// limits and the daemon's.
func (d *Daemon) batchFor(ctx context.Context) (batchLimits, bool) {
	if d.batcher == nil {
		return batchLimits{}, false
	}
	s, ok := d.snapshot()
	if !ok {
		return batchLimits{}, false
	}
	caps, known := d.remoteCaps(ctx, s)
	if known != capsAdvertised || caps.Batch == nil {
		return batchLimits{}, false
	}
	d.batchMu.Lock()
	off := !d.batchOffUntil.IsZero() && !d.now().After(d.batchOffUntil)
	lim := batchLimits{
		ops:     min(d.batchSize, caps.Batch.MaxOperations),
		payload: int(min(int64(d.batchBytes), caps.Batch.MaxBytes)),
		wire:    int(min(caps.Batch.MaxBytes, int64(maxInt))),
	}
	batch := !off && lim.ops > 1
	lim.ops = min(lim.ops, d.windowLocked())
	d.batchMu.Unlock()
	return lim, batch
}

// windowLocked returns batchWindow, with d.batchMu held.
//
// A batch's size follows its answers, as a TCP window does: the first
// claims take initialBatchWindow operations, each batch the remote
// answered doubles the window (up to the limits), and each that got no
// answer at all (a network error or a timeout of the whole request)
// halves it, down to 2. So the first operation is done one round trip
// after the capabilities are read, not after the server has worked
// through the concurrency times a full batch; a long queue reaches full
// batches after a few round trips; and a remote too slow to answer a
// full batch within the request's timeout gets smaller ones instead of
// the same batch resent whole.
func (d *Daemon) windowLocked() int {
	if d.batchWindow == 0 {
		d.batchWindow = initialBatchWindow
	}
	return d.batchWindow
}

// batchAnswered adapts batchWindow to a batch's outcomes: any answer
// from the server grows it, none shrinks it.
func (d *Daemon) batchAnswered(outs []transport.Outcome) {
	answered, lost := false, false
	for _, o := range outs {
		switch {
		case o.Status != 0:
			answered = true
		case o.Code == transport.CodeNetwork || o.Code == transport.CodeTimeout:
			lost = true
		}
	}
	d.batchMu.Lock()
	w := d.windowLocked()
	switch {
	case answered:
		w = min(w*2, d.batchSize)
	case lost:
		w = max(w/2, 2)
	}
	d.batchWindow = w
	d.batchMu.Unlock()
}

const maxInt = int(^uint(0) >> 1)

// sendOne sends an operation's request: through its batch's collector
// when it was claimed in a batch, else alone.
func (d *Daemon) sendOne(ctx context.Context, id string, r transport.Request) transport.Outcome {
	if coll, ok := ctx.Value(collectorKey{}).(*collector); ok {
		coll.mu.Lock()
		coll.sent(id)
		coll.mu.Unlock()
		if o, single := coll.send(r); !single {
			return o
		}
	}
	return d.sender.Send(ctx, r)
}

// sent marks id as one that reached its send (so its end is not a leave).
func (c *collector) sent(id string) {
	if c.sentIDs == nil {
		c.sentIDs = make(map[string]bool)
	}
	c.sentIDs[id] = true
}

// claimBatch takes up to lim.ops ready operations (lim.payload bytes of
// payload) of the current session's account. ok is false when there is none, signed out or
// paused, or while a misconfigured remote is rechecked (one at a time).
func (d *Daemon) claimBatch(ctx context.Context, lim batchLimits) (cs []claimed, ok bool, err error) {
	sess, ok := d.snapshot()
	if !ok {
		return nil, false, nil
	}
	at, ok, err := d.store.NextWake(sess.account)
	if err != nil || !ok || at.After(d.now()) || d.offlineHold() {
		return nil, false, err
	}
	gateOK, trial := d.remoteGate()
	if !gateOK {
		return nil, false, nil
	}
	owner := d.newOwner()
	if trial {
		op, err := d.store.Claim(ctx, sess.account, owner, d.lease)
		if err != nil {
			d.endTrial()
			if errors.Is(err, queue.ErrNoReady) {
				return nil, false, nil
			}
			return nil, false, err
		}
		return []claimed{{op: op, owner: owner, sess: sess, trial: true}}, true, nil
	}
	ops, err := d.store.ClaimN(ctx, sess.account, owner, d.lease, lim.ops, lim.payload)
	if errors.Is(err, queue.ErrNoReady) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, op := range ops {
		cs = append(cs, claimed{op: op, owner: owner, sess: sess})
	}
	return cs, true, nil
}

// processBatch processes a claimed batch: one goroutine per operation,
// one request for those that reach their send.
func (d *Daemon) processBatch(hard context.Context, cs []claimed, lim batchLimits) {
	coll := &collector{d: d, hard: hard, sess: cs[0].sess, lim: lim, n: len(cs)}
	ctx := context.WithValue(hard, collectorKey{}, coll)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			d.processOne(ctx, c, false)
			coll.mu.Lock()
			reached := coll.sentIDs[c.op.ID]
			coll.mu.Unlock()
			if !reached {
				coll.leave()
			}
		})
	}
	wg.Wait()
}
