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
// once every operation has sent or left. A remote without the batch
// route (404) gets single requests, and the route is asked for again an
// hour later.

// BatchMode says whether operations are sent in batches.
type BatchMode string

// Batch modes.
const (
	BatchAuto BatchMode = "auto" // batches when the remote has the route
	BatchOn   BatchMode = "on"   // the same, and a missing route is logged as a warning
	BatchOff  BatchMode = "off"  // one request per operation
)

// Defaults of batched sends.
const (
	DefaultBatchSize  = 100
	DefaultBatchBytes = 4 << 20
	noBatchRecheck    = time.Hour
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
	d := c.d
	ctx, cancel := context.WithTimeout(c.hard, d.lease*2/3)
	defer cancel()
	unhook := context.AfterFunc(c.sess.ctx, cancel)
	defer unhook()
	d.inSend.Add(int64(len(reqs)))
	outs, err := d.batcher.SendBatch(ctx, reqs)
	d.inSend.Add(-int64(len(reqs)))
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

// noBatch records that the remote has no batch route.
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
		level("daemon: the remote has no batch route (404); sending one request per operation", "recheck", noBatchRecheck)
	}
}

// batching reports whether the next claim should take a batch.
func (d *Daemon) batching() bool {
	if d.batcher == nil {
		return false
	}
	d.batchMu.Lock()
	defer d.batchMu.Unlock()
	return d.batchOffUntil.IsZero() || d.now().After(d.batchOffUntil)
}

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

// claimBatch takes up to BatchSize ready operations of the current
// session's account. ok is false when there is none, signed out or
// paused, or while a misconfigured remote is rechecked (one at a time).
func (d *Daemon) claimBatch(ctx context.Context) (cs []claimed, ok bool, err error) {
	sess, ok := d.snapshot()
	if !ok {
		return nil, false, nil
	}
	at, ok, err := d.store.NextWake(sess.account)
	if err != nil || !ok || at.After(d.now()) {
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
	ops, err := d.store.ClaimN(ctx, sess.account, owner, d.lease, d.batchSize, d.batchBytes)
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
func (d *Daemon) processBatch(hard context.Context, cs []claimed) {
	coll := &collector{d: d, hard: hard, sess: cs[0].sess, n: len(cs)}
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
