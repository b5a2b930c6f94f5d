package daemon

import (
	"context"
	"net/http"
	"time"
)

// Prober is a Sender that can also ask whether the remote answers without
// sending an operation. *transport.Client is one.
type Prober interface {
	// Probe returns the status of any answer, or an error when none came.
	Probe(ctx context.Context) (status int, err error)
}

// DefaultProbeInterval sets how often the daemon probes the remote while
// it does not answer (Config.ProbeInterval): the first probe goes a
// second after the outage begins (firstProbe), and the wait doubles
// after every probe, up to probeMaxFactor times the interval: 1s, 2s,
// 4s, ..., then every minute.
const DefaultProbeInterval = 5 * time.Second

// probeMaxFactor bounds the probe wait at this many probe intervals.
const probeMaxFactor = 12

// prober probes the remote while it is unreachable and operations are
// queued, so that what waited goes within a minute of the network coming
// back, not after the rest of a backoff of up to DefaultBackoffMax.
// Without it, the earliest waiting operation is the only probe. It
// probes after start too, for the backoffs a previous run left in the
// queue. It sleeps, without a timer, while the remote answers or nothing
// is queued; a write or a session change does not put a due probe off.
func (d *Daemon) prober(hard context.Context, p Prober) {
	defer d.life.wg.Done()
	// A probe in flight ends at Stop: unlike a send, it carries nothing
	// worth waiting for.
	ctx, cancel := context.WithCancel(hard)
	unwatched := make(chan struct{})
	go func() {
		defer close(unwatched)
		select {
		case <-d.life.stopCh:
		case <-ctx.Done():
		}
		cancel()
	}()
	var timer *time.Timer // the next probe, when one is due
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		cancel()
		<-unwatched
	}()
	wait := d.firstProbe()
	for {
		wake := d.wakeChan() // a write or a session change: look again
		if timer == nil && d.probeArmed() {
			timer = time.NewTimer(wait)
		}
		var fire <-chan time.Time
		if timer != nil {
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-d.offline: // a new outage: start the schedule over
			wait = d.firstProbe()
			if timer != nil {
				timer.Stop()
				timer = nil
			}
		case <-wake:
		case <-fire:
			timer = nil
			if d.probeWanted() {
				d.probe(ctx, p)
				wait = min(2*wait, probeMaxFactor*d.probeEvery)
			}
		}
	}
}

// firstProbe is how long after an outage begins the first probe goes:
// the workers hold the queue meanwhile (offlineHold), so a blip (one
// send timing out) holds it for a second, not a whole probe interval.
// The waits then double up to probeMaxFactor intervals.
func (d *Daemon) firstProbe() time.Duration { return min(d.probeEvery, time.Second) }

// probeNow tells the prober that the remote just became unreachable.
func (d *Daemon) probeNow() {
	select {
	case d.offline <- struct{}{}:
	default:
	}
}

// probeArmed reports whether the prober should keep a probe scheduled:
// the remote is not known to answer, the session may send, and its
// account has operations queued.
func (d *Daemon) probeArmed() bool {
	_, ok := d.probeNext()
	return ok
}

// probeWanted reports whether a probe now would tell something that no
// send is telling: armed, and no operation is ready to go (a send is a
// probe too), or the workers hold them for the probe (offlineHold).
func (d *Daemon) probeWanted() bool {
	at, ok := d.probeNext()
	return ok && (at.After(d.now()) || d.offlineHold())
}

// offlineHold reports whether the workers hold the queue for the prober:
// a prober runs, and the remote did not answer the latest attempt (a
// send's network error or timeout, a failed pull or probe). Claiming and
// failing every ready operation one by one against a remote that is
// plainly unreachable cost a laptop most of a core for as long as it
// stayed offline (a million queued: 65%), and grew the file with every
// attempt recorded. While held, only the prober tries the remote; the
// moment anything answers (a probe, a pull, a refresh), observe wakes
// the workers.
func (d *Daemon) offlineHold() bool {
	if !d.probing.Load() {
		return false
	}
	d.onlineMu.Lock()
	defer d.onlineMu.Unlock()
	return d.contacted && !d.online
}

// probeNext is when the account's next queued operation may go, if the
// prober is armed.
func (d *Daemon) probeNext() (time.Time, bool) {
	d.onlineMu.Lock()
	answers := d.contacted && d.online
	d.onlineMu.Unlock()
	if answers {
		return time.Time{}, false
	}
	sess, ok := d.snapshot()
	if !ok {
		return time.Time{}, false
	}
	at, ok, err := d.store.NextWake(sess.account)
	if err != nil {
		return at, false
	}
	if d.pullFailing() && (!ok || at.After(d.now())) {
		// The puller waits out a backoff after failed reads: a probe
		// tells it when the remote answers again, however little is
		// queued (an idle device that only pulls).
		return d.now().Add(time.Hour), true
	}
	return at, ok
}

// probe asks the remote whether it answers and records what it learned:
// no answer keeps the daemon offline; a well answer (not 5xx or 429) ends
// the outage and sends what waited.
func (d *Daemon) probe(ctx context.Context, p Prober) {
	d.onlineMu.Lock()
	answered := d.answers
	d.onlineMu.Unlock()
	status, err := p.Probe(ctx)
	switch {
	case ctx.Err() != nil:
		return // stopping: says nothing about the remote
	case err != nil:
		d.onlineMu.Lock()
		stale := d.answers != answered
		d.onlineMu.Unlock()
		if stale {
			return // a send got an answer meanwhile: old news
		}
		d.logger.Debug("daemon: the remote does not answer", "err", err)
		d.observe(false, false, true)
		return
	}
	well := status < http.StatusInternalServerError && status != http.StatusTooManyRequests
	d.logger.Debug("daemon: the remote answers", "status", status)
	d.observe(true, well, true)
}
