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
// one. A batch is made of units: an operation alone, or a chain (a
// head and the updates claimed behind it, queue.Store.ClaimChains),
// whose requests go together, the followers chained after the head.
type collector struct {
	d       *Daemon
	hard    context.Context
	sess    sessionSnap
	lim     batchLimits
	mu      sync.Mutex
	n       int // units in the batch
	left    int // those that stopped without sending
	sent    int // those that sent
	reqs    []transport.Request
	waiters []chan batchAnswer
	sentIDs map[string]bool // operations that reached their send

	// followers are the claimed followers of a chain's head, by the
	// head's id; chains, once the head sent, what became of them.
	followers map[string][]claimed
	chains    map[string]*chainSend
}

// chainSend is what became of a chain's followers: their outcomes, in
// order; a follower with none (nil) was not sent (stopped by its own
// guard, or the one before it was not sent).
type chainSend struct {
	outs []*transport.Outcome
}

type batchAnswer struct {
	o      transport.Outcome
	single bool // no batch route: send alone
}

// send is the batch's Send for one unit (an operation, or a chain's
// head and followers): it waits for the others and returns each
// request's answer.
func (c *collector) send(rs []transport.Request) []batchAnswer {
	chs := make([]chan batchAnswer, len(rs))
	c.mu.Lock()
	for i, r := range rs {
		chs[i] = make(chan batchAnswer, 1)
		c.reqs = append(c.reqs, r)
		c.waiters = append(c.waiters, chs[i])
	}
	c.sent++
	c.maybeFire()
	c.mu.Unlock()
	as := make([]batchAnswer, len(rs))
	for i, ch := range chs {
		as[i] = <-ch
	}
	return as
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
	if c.sent+c.left != c.n || len(c.reqs) == 0 {
		return
	}
	reqs, waiters := c.reqs, c.waiters
	c.reqs, c.waiters = nil, nil
	go c.fire(reqs, waiters) // owned: ends when the batch request does
}

func (c *collector) fire(reqs []transport.Request, waiters []chan batchAnswer) {
	groups, alone, cut := c.d.splitBatch(reqs, c.lim)
	for _, i := range alone {
		waiters[i] <- batchAnswer{single: true}
	}
	for _, i := range cut {
		waiters[i] <- batchAnswer{o: notChained()}
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
	d.metrics.batchOps.Observe(float64(len(reqs)))
	outs, err := d.batcher.SendBatch(ctx, reqs)
	d.inSend.Add(-int64(len(reqs)))
	if err == nil {
		d.batchAnswered(outs)
	}
	if err != nil {
		var tooLarge *transport.BatchTooLargeError
		switch {
		case errors.Is(err, transport.ErrNoBatch):
			d.noBatch()
		case errors.As(err, &tooLarge):
			d.batchTooLarge(tooLarge)
		default:
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
// returns the indexes of each batch, of the requests to send alone (one
// too big for any batch, or left alone by the split) and of the chained
// requests cut from the request they follow (not in its batch right
// behind it), which are not sent.
func (d *Daemon) splitBatch(reqs []transport.Request, lim batchLimits) (groups [][]int, alone, cut []int) {
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
		}
		follows := len(cur) > 0 && cur[len(cur)-1] == i-1
		if r.Chained && !follows {
			cut = append(cut, i)
			continue
		}
		if lim.wire > 0 && transport.BatchEnvelopeBytes+b > lim.wire {
			if r.Chained {
				cut = append(cut, i)
			} else {
				alone = append(alone, i)
			}
			continue
		}
		sep := 0
		if len(cur) > 0 {
			sep = 1
		}
		if len(cur) == lim.ops || (lim.wire > 0 && size+sep+b > lim.wire) {
			if r.Chained {
				cut = append(cut, i) // what it follows ends this batch
				continue
			}
			flush()
			sep = 0
		}
		cur = append(cur, i)
		size += sep + b
	}
	flush()
	return groups, alone, cut
}

// batchTooLarge records that the remote refused a batch of e.Bytes as
// too large although it is within the size the remote advertises (a
// proxy in front of it may have a lower limit): later batches stay
// under half of that, down to minBatchWire, for the daemon's lifetime.
// The refused batch's operations are then sent alone (each alone may
// still be too large: that one is rejected, as its single send would
// be).
func (d *Daemon) batchTooLarge(e *transport.BatchTooLargeError) {
	d.batchMu.Lock()
	prev := d.batchWireCap
	capBytes := max(e.Bytes/2, minBatchWire)
	if prev == 0 || capBytes < prev {
		d.batchWireCap = capBytes
	}
	now := d.batchWireCap
	d.batchMu.Unlock()
	if now != prev {
		d.logger.Warn("daemon: the remote refused a batch as too large (413) within its advertised limit; smaller batches from now on",
			"operations", e.Operations, "bytes", e.Bytes, "max_batch_bytes", now)
	}
}

// minBatchWire is the least batchWireCap: below it a batch holds about
// one operation, and operations go alone.
const minBatchWire = 4 << 10

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
	ops     int  // operations
	payload int  // bytes of the operations' payload, for the claim
	wire    int  // bytes of request body (the remote's maxBytes); 0: no bound
	chains  bool // the remote runs chained updates: claim a head's followers with it
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
		chains:  caps.Batch.Chains,
	}
	if d.batchWireCap > 0 && (lim.wire == 0 || d.batchWireCap < lim.wire) {
		lim.wire = d.batchWireCap
		lim.payload = min(lim.payload, d.batchWireCap)
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

// notChained is the outcome of a chained request that was not sent: the
// one it follows was not in its batch.
func notChained() transport.Outcome {
	return transport.Outcome{Decision: transport.Retry, Code: transport.CodeDependencyFailed,
		Message: "not sent: the request it follows was not in the batch"}
}

// sendOne sends an operation's request: through its batch's collector
// when it was claimed in a batch, else alone. A chain's head sends its
// followers with it; when its own answer is not done, they are released
// before it returns, so before the head's outcome is recorded (a
// follower is never sending behind a head that is not).
func (d *Daemon) sendOne(ctx context.Context, id string, r transport.Request) transport.Outcome {
	if coll, ok := ctx.Value(collectorKey{}).(*collector); ok {
		coll.mu.Lock()
		coll.markSent(id)
		fs := coll.followers[id]
		coll.mu.Unlock()
		rs := []transport.Request{r}
		var built []int // the followers sent, by index in fs
		for i, f := range fs {
			fr, ok := d.followerRequest(f, r.Token)
			if !ok {
				break // it and the rest wait for the head
			}
			rs = append(rs, fr)
			built = append(built, i)
		}
		as := coll.send(rs)
		if len(fs) > 0 {
			cs := &chainSend{outs: make([]*transport.Outcome, len(fs))}
			for j, i := range built {
				if !as[j+1].single {
					o := as[j+1].o
					cs.outs[i] = &o
				}
			}
			released := as[0].single || as[0].o.Decision != transport.Done
			coll.mu.Lock()
			coll.chains[id] = cs
			if released {
				delete(coll.followers, id) // recordFollowers has nothing left to do
			}
			coll.mu.Unlock()
			if released {
				d.releaseFollowers(fs, cs, 0)
			}
		}
		if !as[0].single {
			return as[0].o
		}
	}
	return d.sender.Send(ctx, r)
}

// followerRequest builds the request of a chain's follower, after the
// guards a single send passes (the session, the age guard), chained
// after the request before it. ok is false when it is not to be sent.
func (d *Daemon) followerRequest(f claimed, token string) (transport.Request, bool) {
	op := f.op
	if d.hooks.afterClaim != nil {
		d.hooks.afterClaim(op)
	}
	if op.AccountID != f.sess.account || !d.current(f.sess) {
		return transport.Request{}, false
	}
	if op.MaybeApplied && d.now().Sub(ageStart(op)) > d.maxAge {
		return transport.Request{}, false // it fails by its age once it heads its partition
	}
	r, err := d.request(op, token)
	if err != nil {
		return transport.Request{}, false
	}
	r.Chained = true
	return r, true
}

// releaseFollowers returns a chain's followers from index from on to
// pending, the last first: one that was not run (not sent, or the
// remote's 424) unsent; one that may have been (the whole batch got no
// answer) maybe applied; one the remote applied, too (its outcome waits
// for the head's, which is not recorded: sent again, it replays).
func (d *Daemon) releaseFollowers(fs []claimed, cs *chainSend, from int) {
	for i := len(fs) - 1; i >= from; i-- {
		o := cs.outs[i]
		switch {
		case o == nil || o.Code == transport.CodeDependencyFailed:
			d.releaseUnsent(fs[i], "the operation it follows was not applied")
		case o.Decision == transport.Done:
			d.release(fs[i], "the operation it follows is not recorded", true)
		default:
			d.release(fs[i], "the operation it follows was not applied", maybeApplied(*o))
		}
	}
}

// recordFollowers records the outcomes of the followers of head, once
// head's own outcome is recorded, in order: each only once the one
// before it is done; before one that is not done, the rest are
// released.
func (d *Daemon) recordFollowers(coll *collector, head claimed) {
	coll.mu.Lock()
	fs, cs := coll.followers[head.op.ID], coll.chains[head.op.ID]
	coll.mu.Unlock()
	if len(fs) == 0 {
		return
	}
	if cs == nil {
		// The head never sent: its followers did not either.
		d.releaseFollowers(fs, &chainSend{outs: make([]*transport.Outcome, len(fs))}, 0)
		return
	}
	prev := head.op.ID
	for i, f := range fs {
		if op, err := d.store.GetOperation(prev); err != nil || op.State != queue.StateDone {
			// The one before it is not recorded done (its outcome is
			// not done, or its write failed and is kept): it and the
			// rest wait.
			d.releaseFollowers(fs, cs, i)
			return
		}
		o := cs.outs[i]
		if o == nil || o.Code == transport.CodeDependencyFailed {
			d.releaseFollowers(fs, cs, i)
			return
		}
		if o.Decision != transport.Done {
			d.releaseFollowers(fs, cs, i+1)
		}
		if d.hooks.afterResponse != nil {
			d.hooks.afterResponse(f.op, *o)
		}
		d.contact(*o)
		d.record(f, *o, false, false)
		if o.Decision != transport.Done {
			return
		}
		prev = f.op.ID
	}
}

// leaveChain releases, unsent and last first, the followers of c when c
// heads a chain in a batch and stops before its send: before c's own
// outcome is recorded, so none is left sending behind a head that is
// not.
func (d *Daemon) leaveChain(ctx context.Context, c claimed) {
	coll, ok := ctx.Value(collectorKey{}).(*collector)
	if !ok {
		return
	}
	coll.mu.Lock()
	fs := coll.followers[c.op.ID]
	delete(coll.followers, c.op.ID)
	coll.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		d.releaseUnsent(fs[i], "the operation it follows was not sent")
	}
}

// markSent marks id as one that reached its send (so its end is not a
// leave).
func (c *collector) markSent(id string) {
	if c.sentIDs == nil {
		c.sentIDs = make(map[string]bool)
	}
	c.sentIDs[id] = true
}

// claimBatch takes up to lim.ops ready operations (lim.payload bytes of
// payload) of the current session's account, in chains (a head, and
// with lim.chains the updates queued behind it). ok is false when there
// is none, signed out or paused, or while a misconfigured remote is
// rechecked (one at a time).
func (d *Daemon) claimBatch(ctx context.Context, lim batchLimits) (cs [][]claimed, ok bool, err error) {
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
		return [][]claimed{{{op: op, owner: owner, sess: sess, trial: true}}}, true, nil
	}
	follow := 0
	if lim.chains {
		follow = lim.ops - 1
	}
	chains, err := d.store.ClaimChains(ctx, sess.account, owner, d.lease, lim.ops, lim.payload, follow)
	if errors.Is(err, queue.ErrNoReady) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, chain := range chains {
		var c []claimed
		for _, op := range chain {
			c = append(c, claimed{op: op, owner: owner, sess: sess})
		}
		cs = append(cs, c)
	}
	return cs, true, nil
}

// batchOps counts the operations of claimed chains.
func batchOps(cs [][]claimed) int {
	n := 0
	for _, c := range cs {
		n += len(c)
	}
	return n
}

// processBatch processes a claimed batch: one goroutine per chain (an
// operation alone is a chain of one), one request for those that reach
// their send. A chain's goroutine records its head's outcome, then its
// followers' in order (recordFollowers).
func (d *Daemon) processBatch(hard context.Context, cs [][]claimed, lim batchLimits) {
	coll := &collector{d: d, hard: hard, sess: cs[0][0].sess, lim: lim, n: len(cs),
		followers: map[string][]claimed{}, chains: map[string]*chainSend{}}
	for _, c := range cs {
		if len(c) > 1 {
			coll.followers[c[0].op.ID] = c[1:]
		}
	}
	ctx := context.WithValue(hard, collectorKey{}, coll)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			head := c[0]
			d.processOne(ctx, head, false)
			coll.mu.Lock()
			reached := coll.sentIDs[head.op.ID]
			coll.mu.Unlock()
			if !reached {
				coll.leave()
			}
			d.recordFollowers(coll, head)
		})
	}
	wg.Wait()
}
