package localapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/syncd/syncd/queue"
)

// operationIDParam parses the {id} path value of an operation route.
func operationIDParam(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if validID(id, queue.ValidateOperationID) != nil {
		return "", badRequest(CodeInvalidRequest, "operation id in the path: "+idProblem(queue.MaxOperationIDLen))
	}
	return id, nil
}

// GET /v1/operations?state=&limit=&after=&account= → 200 {items, next}.
// Without account, the current session's account's operations are
// listed, or every account's when signed out. Items leave out the
// payload; GET /v1/operations/{id} has it.
func (s *Server) listOperations(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "state", "limit", "after", "account")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var opts queue.ListOptions
	if st := q.Get("state"); st != "" {
		if opts.State, err = queue.ParseState(st); err != nil {
			s.fail(w, r, badRequest(CodeInvalidRequest, fmt.Sprintf("state must be one of %v, got %q", queue.States, st)))
			return
		}
	}
	if opts.Limit, err = parseLimit(q.Get("limit")); err != nil {
		s.fail(w, r, err)
		return
	}
	if after := q.Get("after"); after != "" {
		if _, err := strconv.ParseUint(after, 10, 64); err != nil {
			s.fail(w, r, badRequest(CodeInvalidRequest, fmt.Sprintf("after must be a sequence number from a previous page's next, got %q", after)))
			return
		}
		opts.After = after
	}
	opts.AccountID = q.Get("account")
	if opts.AccountID != "" && queue.ValidateAccountID(opts.AccountID) != nil {
		s.fail(w, r, badRequest(CodeInvalidRequest, "account: "+idProblem(queue.MaxAccountIDLen)))
		return
	}
	current, signedIn := s.d.Account()
	if g := callerOf(r); g != nil {
		// An app reaches the signed-in account's operations only.
		if opts.AccountID != "" && opts.AccountID != current {
			s.fail(w, r, errAccountNotGranted(g))
			return
		}
		if !signedIn {
			writeJSON(w, http.StatusOK, listAnswer[queue.Operation]{Items: []queue.Operation{}})
			return
		}
		opts.EntityTypes = g.typeList
	}
	if opts.AccountID == "" {
		opts.AccountID = current
	}
	ops, next, err := s.store.ListOperations(opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for i := range ops {
		ops[i].Payload = nil
	}
	ans := listAnswer[queue.Operation]{Items: ops, Next: next}
	writeJSON(w, http.StatusOK, ans)
}

// GET /v1/operations/{id} → 200 operation.
func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) {
	id, err := operationIDParam(r)
	if err == nil {
		_, err = query(r)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	op, err := s.visibleOperation(r, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, op)
}

// visibleOperation returns the operation id if the caller may see it:
// to an app token, an operation of a type it is not granted, or of an
// account that is not signed in, does not exist (404, as an unknown id).
func (s *Server) visibleOperation(r *http.Request, id string) (queue.Operation, error) {
	op, err := s.store.GetOperation(id)
	if err != nil {
		return op, err
	}
	if g := callerOf(r); g != nil {
		if current, ok := s.d.Account(); !ok || op.AccountID != current || !g.mayUse(op.EntityType) {
			return queue.Operation{}, fmt.Errorf("%w: %s", queue.ErrOperationNotFound, id)
		}
	}
	return op, nil
}

// errAccountNotGranted answers an app's ?account= of an account that is
// not signed in.
func errAccountNotGranted(g *grant) error {
	return &apiError{http.StatusForbidden, CodeAccountNotGranted, fmt.Sprintf("app %q's token reaches the signed-in account's data only", g.name)}
}

// POST /v1/operations/{id}/retry → 200 operation (pending again). Only a
// permanently failed operation can be retried (409 illegal_transition).
func (s *Server) retryOperation(w http.ResponseWriter, r *http.Request) {
	id, err := s.parseOperationAction(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var op queue.Operation
	err = callerOf(r).commit(func() (err error) {
		op, err = s.store.Retry(r.Context(), id)
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.auditApp(r, "retry", "operation", id)
	s.d.Notify()
	writeJSON(w, http.StatusOK, op)
}

// discardAnswer is the answer to a discard: the operation row is gone.
type discardAnswer struct {
	OperationID string `json:"operationId"`
	Discarded   bool   `json:"discarded"`
}

// POST /v1/operations/{id}/discard → 200 {operationId, discarded}. Only a
// permanently failed operation can be discarded (409 illegal_transition).
func (s *Server) discardOperation(w http.ResponseWriter, r *http.Request) {
	id, err := s.parseOperationAction(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	op, opErr := s.store.GetOperation(id)
	if err := callerOf(r).commit(func() error { return s.store.Discard(r.Context(), id) }); err != nil {
		s.fail(w, r, err)
		return
	}
	s.auditApp(r, "discard", "operation", id)
	// A discarded change may leave data the server does not hold: its
	// entity then waits stale for a read of the record, made now if the
	// remote answers (otherwise the puller makes it later).
	if opErr == nil {
		if e, err := s.store.GetEntity(op.AccountID, op.EntityType, op.EntityID); err == nil &&
			e.SyncState == queue.SyncStale && e.SyncCode == queue.StaleRefreshNeeded {
			if _, _, err := s.d.Refresh(r.Context(), op.EntityType, op.EntityID); err != nil {
				s.logger.Debug("localapi: refresh after a discard failed; syncd tries again later", "err", err)
			}
		}
	}
	s.d.Notify() // the next operation of the partition may be ready now
	writeJSON(w, http.StatusOK, discardAnswer{OperationID: id, Discarded: true})
}

func (s *Server) parseOperationAction(r *http.Request) (string, error) {
	id, err := operationIDParam(r)
	if err != nil {
		return "", err
	}
	if _, err := query(r); err != nil {
		return "", err
	}
	if err := requireNoBody(r); err != nil {
		return "", err
	}
	if callerOf(r) != nil {
		// An app acts only on operations of its types.
		if _, err := s.visibleOperation(r, id); err != nil {
			return "", err
		}
	}
	return id, nil
}

// auditApp logs an app's action on what it may not have made (retry,
// discard, resolve: the grant is on types, so maybe another app's): an
// operation records the app that made it, the log the one that acted
// on it. kind is "operation" or "entity".
func (s *Server) auditApp(r *http.Request, action, kind, id string) {
	if g := callerOf(r); g != nil {
		s.logger.Info("localapi: app acted", "app", g.name, "action", action, kind, id)
	}
}
