package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Refreshing reads one record of the server again and settles the local
// entity with it (queue.Store.ApplyRecord): the app's POST
// .../refresh, and the entities that wait stale after a discarded
// change whose server data is not known here (queue.StaleRefreshNeeded),
// which the puller refreshes when it is up to date and the local API
// right after such a discard.

// RecordReader reads one record of the server; *transport.Client is one.
type RecordReader interface {
	Record(ctx context.Context, token, entityType, clientID string) (*transport.Change, error)
}

// Errors of Refresh.
var (
	// ErrNoRecordRead: the remote cannot read one record (it answered
	// 404 for the read, or the transport has no such read).
	ErrNoRecordRead = errors.New("daemon: the remote cannot read one record")
	// ErrRemote: the read failed (the remote is unreachable, or answered
	// an error); the entity is unchanged.
	ErrRemote = errors.New("daemon: reading the record from the remote failed")
)

// maxRefreshRound bounds the stale entities one round refreshes.
const maxRefreshRound = 100

// Refresh reads the server's record of entityType/id for the signed-in
// account and settles the local entity with it. It returns the entity
// as it is now; removed is set when it left the store (the server holds
// nothing under the id, and nothing local waits to be sent).
func (d *Daemon) Refresh(ctx context.Context, entityType, id string) (e queue.Entity, removed bool, err error) {
	if d.reader == nil {
		return e, false, ErrNoRecordRead
	}
	s, ok := d.snapshot()
	if !ok {
		return e, false, ErrNoSession
	}
	return d.refresh(ctx, s, entityType, id)
}

func (d *Daemon) refresh(ctx context.Context, s sessionSnap, entityType, id string) (e queue.Entity, removed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(s.ctx, cancel)() // the session ended: drop the read
	defer cancel()
	rec, err := d.reader.Record(ctx, s.token, entityType, id)
	switch {
	case err == nil:
		d.observe(true, true, false)
	case errors.Is(err, transport.ErrNoRecordRead):
		d.observe(true, false, false)
		return e, false, fmt.Errorf("%w: %v", ErrNoRecordRead, err)
	case errors.Is(err, transport.ErrUnauthorized):
		d.observe(true, false, false)
		d.refreshNeeded(s)
		return e, false, fmt.Errorf("%w: %v", ErrRemote, err)
	default:
		if errors.Is(err, transport.ErrTimeout) || !errors.Is(err, transport.ErrStatus) && ctx.Err() == nil {
			d.observe(false, false, false)
		}
		return e, false, fmt.Errorf("%w: %v", ErrRemote, err)
	}
	var c *queue.Change
	if rec != nil {
		c = &queue.Change{EntityType: entityType, EntityID: id, ServerID: rec.ID, Version: rec.Version,
			Deleted: rec.Deleted, Data: rec.Data, OperationID: rec.OperationID}
	}
	err = d.AccountWrite(func(account string) error {
		if account != s.account || !d.current(s) {
			return ErrNoSession
		}
		var err error
		e, removed, err = d.store.ApplyRecord(context.Background(), s.account, entityType, id, c)
		return err
	})
	return e, removed, err
}

// RefreshStale refreshes the signed-in account's entities that wait to
// be read again (at most maxRefreshRound), and returns how many it
// settled. It stops at the first read that fails: they wait for the
// next round.
func (d *Daemon) RefreshStale(ctx context.Context) (int, error) {
	if d.reader == nil {
		return 0, nil
	}
	s, ok := d.snapshot()
	if !ok {
		return 0, nil
	}
	refs, err := d.store.NeedsRefresh(s.account, maxRefreshRound)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range refs {
		if _, _, err := d.refresh(ctx, s, r.Type, r.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// VersionReader reads the versions the server keeps of a record;
// *transport.Client is one.
type VersionReader interface {
	Versions(ctx context.Context, token, entityType, serverID string) ([]transport.Version, error)
}

// Errors of Versions.
var (
	// ErrNoVersions: the remote keeps no history of the record (it
	// answered 404, or the transport has no such read).
	ErrNoVersions = errors.New("daemon: the remote keeps no versions of the record")
	// ErrNotOnServer: the entity has no record on the server yet (its
	// create has not been answered).
	ErrNotOnServer = errors.New("daemon: the entity has no record on the server yet")
)

// Versions reads the versions the server keeps of entityType/id's record
// for the signed-in account, newest first: an edit overwritten or
// resolved away can be found there again. Nothing local changes.
func (d *Daemon) Versions(ctx context.Context, entityType, id string) ([]transport.Version, error) {
	vr := d.versions
	if vr == nil {
		return nil, ErrNoVersions
	}
	s, ok := d.snapshot()
	if !ok {
		return nil, ErrNoSession
	}
	e, err := d.store.EntityRow(s.account, entityType, id)
	if err != nil {
		return nil, err
	}
	serverID := e.ServerID
	if e.Server != nil && e.Server.ID != "" {
		serverID = e.Server.ID // the record made again under the id
	}
	if serverID == "" {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotOnServer, entityType, id)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(s.ctx, cancel)()
	defer cancel()
	vs, err := vr.Versions(ctx, s.token, entityType, serverID)
	switch {
	case err == nil:
		d.observe(true, true, false)
		return vs, nil
	case errors.Is(err, transport.ErrNoVersions):
		d.observe(true, false, false)
		return nil, fmt.Errorf("%w: %v", ErrNoVersions, err)
	case errors.Is(err, transport.ErrUnauthorized):
		d.observe(true, false, false)
		d.refreshNeeded(s)
		return nil, fmt.Errorf("%w: %v", ErrRemote, err)
	default:
		if errors.Is(err, transport.ErrTimeout) || !errors.Is(err, transport.ErrStatus) && ctx.Err() == nil {
			d.observe(false, false, false)
		}
		return nil, fmt.Errorf("%w: %v", ErrRemote, err)
	}
}
