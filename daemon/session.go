package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Session event types.
const (
	EventSessionChanged   = "session.changed"
	EventSessionLoggedOut = "session.logged_out"
)

// LogoutPolicy says what happens to the signed-out account's operations.
type LogoutPolicy string

// The logout policies.
const (
	// LogoutKeep keeps the account's data and operations; they wait,
	// unsent, until the same account signs in again.
	LogoutKeep LogoutPolicy = "keep"
	// LogoutPurge deletes the account's entities and operations.
	LogoutPurge LogoutPolicy = "purge"
)

// SetSession makes accountID the current account and token its bearer
// token for sending. A token transport.ValidateToken refuses (a control
// character, a space, non-ASCII, too long) is ErrInvalidSession. Operations of other accounts are never sent while it
// is current. The session is kept in the data file so sending resumes
// after a restart.
func (d *Daemon) SetSession(ctx context.Context, accountID, token string) error {
	if err := queue.ValidateAccountID(accountID); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSession, err)
	}
	if token == "" {
		return fmt.Errorf("%w: accessToken is empty", ErrInvalidSession)
	}
	if err := transport.ValidateToken(token); err != nil {
		return fmt.Errorf("%w: accessToken %v", ErrInvalidSession, err)
	}
	if err := d.setSession(ctx, accountID, token); err != nil {
		return err
	}
	// A remote paused as misconfigured is checked again at once: the
	// user may have fixed something.
	d.recheckRemote()
	return nil
}

func (d *Daemon) setSession(ctx context.Context, accountID, token string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	data, _ := json.Marshal(map[string]string{"accountId": accountID})
	sess := &queue.Session{AccountID: accountID, AccessToken: token}
	if err := d.store.SaveSession(ctx, sess, queue.Event{Type: EventSessionChanged, AccountID: accountID, Data: data}); err != nil {
		return err
	}
	if d.session == nil || d.session.AccountID != accountID {
		d.endSessionSends()
	}
	d.session = sess
	d.sessionChanged()
	return nil
}

// Logout ends the session. With LogoutKeep the account's operations stay
// queued and paused; with LogoutPurge they and the account's entities are
// deleted, refused (queue.ErrNotPurgeable) while some have not reached
// the server unless force is set.
func (d *Daemon) Logout(ctx context.Context, policy LogoutPolicy, force bool) (purged int, err error) {
	if policy == "" {
		policy = LogoutKeep
	}
	if policy != LogoutKeep && policy != LogoutPurge {
		return 0, fmt.Errorf("%w: %q (want keep or purge)", ErrInvalidPolicy, policy)
	}
	account, purged, err := d.signOut(ctx, policy, force)
	if err != nil || policy != LogoutPurge {
		return purged, err
	}
	// The rows go in bounded transactions, with no lock of the daemon
	// held: app writes (refused now, signed out), sends of other accounts
	// and status reads go on meanwhile. The account cannot sign in until
	// the purge has finished (queue.ErrPurging), and a crash leaves the
	// rest to the next start. A client that goes away does not stop it.
	return purged, d.store.FinishPurge(context.WithoutCancel(ctx), account)
}

// signOut ends the session, after app writes in flight, and with
// LogoutPurge begins the purge of its account (queue.StartPurge).
func (d *Daemon) signOut(ctx context.Context, policy LogoutPolicy, force bool) (account string, purged int, err error) {
	d.writes.Lock() // wait for app writes in flight; hold off new ones
	defer d.writes.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.session == nil {
		return "", 0, ErrNoSession
	}
	account = d.session.AccountID
	if policy == LogoutPurge {
		if purged, err = d.store.StartPurge(ctx, account, force); err != nil {
			return "", 0, err
		}
	}
	data, _ := json.Marshal(map[string]any{"policy": policy, "purged": purged})
	if err := d.store.SaveSession(ctx, nil, queue.Event{Type: EventSessionLoggedOut, AccountID: account, Data: data}); err != nil {
		return account, purged, err
	}
	d.endSessionSends()
	d.session = nil
	d.sessionChanged()
	return account, purged, nil
}

// AccountWrite runs fn, an app write, with the current session's
// account, and keeps Logout from running until fn returns: a write that
// read the account lands before that account is signed out or purged,
// never after. (A switch to another account with SetSession does not
// wait: the write still lands in the account it was made in.) It
// returns ErrNoSession when signed out.
func (d *Daemon) AccountWrite(fn func(accountID string) error) error {
	d.writes.RLock()
	defer d.writes.RUnlock()
	account, ok := d.Account()
	if !ok {
		return ErrNoSession
	}
	return fn(account)
}

// Account returns the current session's account id; ok is false when
// signed out. The token never leaves the daemon.
func (d *Daemon) Account() (accountID string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.session == nil {
		return "", false
	}
	return d.session.AccountID, true
}

// sessionChanged is called with d.mu held after the session changed: a
// new generation (operations claimed under the old one are released, not
// sent), no pause (a new token deserves a try), and the workers wake.
func (d *Daemon) sessionChanged() {
	d.gen++
	d.paused = false
	d.wake()
	d.kickPull()
}

// endSessionSends cancels the sends in flight for the current account
// (logout or account switch), with d.mu held: their operations go back to
// pending and the old account's token is not used any longer.
func (d *Daemon) endSessionSends() {
	if d.sessDone != nil {
		d.sessDone()
		d.sessDone = nil
	}
}

// sessionSnap is the session a worker claimed under.
type sessionSnap struct {
	account string
	token   string
	gen     uint64
	// ctx ends when the account's session ends.
	ctx context.Context
}

// snapshot returns the session workers may send for, or ok false when
// signed out or paused.
func (d *Daemon) snapshot() (s sessionSnap, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.session == nil || d.paused {
		return s, false
	}
	if d.sessDone == nil {
		var ctx context.Context
		ctx, d.sessDone = context.WithCancel(context.Background())
		d.sessCtx = ctx
	}
	return sessionSnap{account: d.session.AccountID, token: d.session.AccessToken, gen: d.gen, ctx: d.sessCtx}, true
}

// current reports whether s is still the session workers may send for.
func (d *Daemon) current(s sessionSnap) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.session != nil && !d.paused && d.gen == s.gen && d.session.AccountID == s.account
}

// refreshNeeded pauses sending after the server refused token, unless
// the session has changed since (a new token arrived meanwhile). It
// returns true when it paused.
func (d *Daemon) refreshNeeded(s sessionSnap) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.session == nil || d.gen != s.gen || d.paused {
		return false
	}
	d.paused = true
	return true
}
