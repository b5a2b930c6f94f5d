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

// DefaultProbeInterval is how long after the remote stops answering the
// daemon first probes it (Config.ProbeInterval). The wait doubles after
// every probe, up to probeMaxFactor times the interval: 5s, 10s, 20s,
// 40s, then every minute.
const DefaultProbeInterval = 5 * time.Second

// probeMaxFactor bounds the probe wait at this many probe intervals.
const probeMaxFactor = 12

// prober probes the remote while it is unreachable and operations wait,
// so that what waited goes within a minute of the network coming back,
// not after the rest of a backoff of up to DefaultBackoffMax. Without
// it, the earliest waiting operation is the only probe. It probes once
// after start too, for the backoffs a previous run left in the queue. It
// sleeps, without a timer, while the remote answers or nothing waits.
func (d *Daemon) prober(hard context.Context, p Prober) {
	defer d.life.wg.Done()
	wait := d.probeEvery
	var timer *time.Timer // the next probe, when one is due
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		wake := d.wakeChan() // a write or a session change: look again
		if timer == nil && d.probeWanted(wait) {
			timer = time.NewTimer(wait)
		}
		var fire <-chan time.Time
		if timer != nil {
			fire = timer.C
		}
		select {
		case <-d.life.stopCh:
			return
		case <-hard.Done():
			return
		case <-d.offline: // a new outage: start the schedule over
			wait = d.probeEvery
			if timer != nil {
				timer.Stop()
				timer = nil
			}
		case <-wake:
		case <-fire:
			timer = nil
			if d.probeWanted(0) {
				d.probe(hard, p)
				wait = min(2*wait, probeMaxFactor*d.probeEvery)
			}
		}
	}
}

// probeNow tells the prober that the remote just became unreachable.
func (d *Daemon) probeNow() {
	select {
	case d.offline <- struct{}{}:
	default:
	}
}

// probeWanted reports whether a probe in wait would tell something that
// no send will tell sooner: the remote is not known to answer, the
// session may send, and its account's next operation waits longer than
// wait.
func (d *Daemon) probeWanted(wait time.Duration) bool {
	d.onlineMu.Lock()
	answers := d.contacted && d.online
	d.onlineMu.Unlock()
	if answers {
		return false
	}
	sess, ok := d.snapshot()
	if !ok {
		return false
	}
	at, ok, err := d.store.NextWake(sess.account)
	return err == nil && ok && at.After(d.now().Add(wait))
}

// probe asks the remote whether it answers and records what it learned:
// no answer keeps the daemon offline; a well answer (not 5xx or 429) ends
// the outage and sends what waited. It reports whether an answer came.
func (d *Daemon) probe(ctx context.Context, p Prober) bool {
	status, err := p.Probe(ctx)
	switch {
	case ctx.Err() != nil:
		return false // stopping: says nothing about the remote
	case err != nil:
		d.logger.Debug("daemon: the remote does not answer", "err", err)
		d.observe(false, false, true)
		return false
	}
	well := status < http.StatusInternalServerError && status != http.StatusTooManyRequests
	d.logger.Debug("daemon: the remote answers", "status", status)
	d.observe(true, well, true)
	return true
}
