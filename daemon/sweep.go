package daemon

import (
	"context"
	"time"
)

// sweeper runs the queue's retention sweep at Start and then every
// SweepInterval until the daemon stops, so done operations and old
// change-log events never pile up.
func (d *Daemon) sweeper(hard context.Context) {
	defer d.life.wg.Done()
	t := time.NewTicker(d.sweepEvery)
	defer t.Stop()
	for {
		d.SweepOnce(hard)
		select {
		case <-d.life.stopCh:
			return
		case <-hard.Done():
			return
		case <-t.C:
		}
	}
}

// SweepOnce runs one retention sweep and logs what it removed.
func (d *Daemon) SweepOnce(ctx context.Context) {
	ops, events, err := d.store.Sweep(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		d.logger.Error("daemon: retention sweep failed", "err", err)
	case ops > 0 || events > 0:
		d.logger.Info("daemon: retention sweep", "operations", ops, "events", events)
	}
}
