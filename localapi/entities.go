package localapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// entityAnswer is an entity as the API returns it; writes add the id of
// the operation they made.
type entityAnswer struct {
	queue.Entity
	OperationID string `json:"operationId,omitempty"`
}

// listAnswer is one page of a list. Next is the cursor for the next page
// (pass it as ?after=), empty on the last page.
type listAnswer[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next"`
}

// entityTypeParam parses the {type} path value.
func entityTypeParam(r *http.Request) (string, error) {
	t := r.PathValue("type")
	if err := queue.ValidateEntityType(t); err != nil {
		return "", badRequest(CodeInvalidRequest, fmt.Sprintf("entity type %q in the path must be 1 to %d letters, digits, '_', '-' or '.'", t, queue.MaxEntityTypeLen))
	}
	return t, nil
}

// entityIDParam parses the {id} path value of an entity route.
// entityPath returns the {type} and {id} of an entity's path.
func entityPath(r *http.Request) (typ, id string, err error) {
	if typ, err = entityTypeParam(r); err != nil {
		return "", "", err
	}
	id, err = entityIDParam(r)
	return typ, id, err
}

func entityIDParam(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := validID(id, queue.ValidateEntityID); err != nil {
		return "", badRequest(CodeInvalidRequest, "entity id in the path: "+idProblem(queue.MaxEntityIDLen))
	}
	return id, nil
}

func idProblem(max int) string {
	return fmt.Sprintf("must be 1 to %d printable ASCII characters without spaces or '/', and not . or ..", max)
}

// lookupType refuses an entity type the server is not configured for
// (404), or the caller's app token is not granted (403).
func (s *Server) lookupType(r *http.Request, t string) error {
	if s.types != nil && !s.types[t] {
		return &apiError{http.StatusNotFound, CodeUnknownEntityType, fmt.Sprintf("entity type %q is not configured", t)}
	}
	if g := callerOf(r); !g.mayUse(t) {
		return &apiError{http.StatusForbidden, CodeTypeNotGranted, fmt.Sprintf("app %q's token is not granted entity type %q", g.name, t)}
	}
	return nil
}

// errNoSession answers a request that needs a signed-in account.
var errNoSession = &apiError{http.StatusConflict, CodeNoSession, "no session: sign in first with PUT /v1/session"}

// account returns the current session's account, or no_session.
func (s *Server) account() (string, error) {
	a, ok := s.d.Account()
	if !ok {
		return "", errNoSession
	}
	return a, nil
}

// POST /v1/entities/{type} {id?, data} → 201 entity + operationId.
func (s *Server) createEntity(w http.ResponseWriter, r *http.Request) {
	typ, err := entityTypeParam(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var id string
	var data json.RawMessage
	idField := &field{name: "id", dst: &id}
	_, err = s.parseWrite(r, idField, &field{name: "data", dst: &data, required: true})
	if err == nil && idField.present {
		if validID(id, queue.ValidateEntityID) != nil {
			err = badRequest(CodeInvalidRequest, `field "id" `+idProblem(queue.MaxEntityIDLen))
		}
	}
	if err == nil {
		err = requireObject("data", data)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.write(w, r, http.StatusCreated, queue.Write{Op: queue.OpCreate, EntityType: typ, EntityID: id, Data: data})
}

// PATCH /v1/entities/{type}/{id} {data} → 200 entity + operationId. data
// is an RFC 7396 merge patch.
func (s *Server) updateEntity(w http.ResponseWriter, r *http.Request) {
	typ, id, err := entityPath(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var data json.RawMessage
	_, err = s.parseWrite(r, &field{name: "data", dst: &data, required: true})
	if err == nil {
		err = requireObject("data", data)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.write(w, r, http.StatusOK, queue.Write{Op: queue.OpUpdate, EntityType: typ, EntityID: id, Data: data})
}

// DELETE /v1/entities/{type}/{id} → 200 entity (deleted) + operationId.
func (s *Server) deleteEntity(w http.ResponseWriter, r *http.Request) {
	typ, id, err := entityPath(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := requireNoBody(r); err != nil {
		s.fail(w, r, err)
		return
	}
	s.write(w, r, http.StatusOK, queue.Write{Op: queue.OpDelete, EntityType: typ, EntityID: id})
}

// parseWrite reads and decodes a write's JSON body into fields.
func (s *Server) parseWrite(r *http.Request, fields ...*field) ([]byte, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return body, decodeObject(body, fields...)
}

// write finishes an entity write whose path and body are parsed: the
// Idempotency-Key and canonical data (canonicalWrite, as a batch's write),
// the type and session look-ups, the queue write, the answer.
func (s *Server) write(w http.ResponseWriter, r *http.Request, status int, wr queue.Write) {
	if _, err := query(r); err != nil {
		s.fail(w, r, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := canonicalWrite(&wr, key); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.lookupType(r, wr.EntityType); err != nil {
		s.fail(w, r, err)
		return
	}
	g := callerOf(r)
	wr.App = g.appName()
	var res queue.Result
	err = g.commit(func() error {
		return s.d.AccountWrite(func(account string) error {
			wr.AccountID = account
			res, err = s.store.Apply(r.Context(), wr)
			if errors.Is(err, queue.ErrKeyReused) {
				// Stored by an older syncd for this same write?
				if fp := s.storedLegacyFingerprint(wr, account, r.URL.EscapedPath()); fp != "" {
					wr.RequestFingerprint = fp
					res, err = s.store.Apply(r.Context(), wr)
				}
			}
			return err
		})
	})
	if errors.Is(err, daemon.ErrNoSession) {
		err = errNoSession
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if res.Replayed {
		w.Header().Set(headerReplayed, "true")
	} else {
		s.d.Notify()
	}
	e := res.Entity
	if e.ID == "" {
		// A replay of a write whose entity has left the store since (its
		// delete reached the server, or the user discarded its create).
		op := res.Operation
		e = queue.Entity{AccountID: op.AccountID, Type: op.EntityType, ID: op.EntityID, Deleted: true}
		if op.State == queue.StateDone {
			e.SyncState = queue.SyncSynced
		}
	}
	writeJSON(w, status, entityAnswer{Entity: e, OperationID: res.Operation.ID})
}

// entityTarget reads the {type} and {id} of a request without a body
// or query parameters, and checks the type is one the caller may use;
// ok is false when it answered the error.
func (s *Server) entityTarget(w http.ResponseWriter, r *http.Request) (typ, id string, ok bool) {
	typ, id, err := entityPath(r)
	if err == nil {
		_, err = query(r)
	}
	if err == nil {
		err = s.lookupType(r, typ)
	}
	if err != nil {
		s.fail(w, r, err)
		return "", "", false
	}
	return typ, id, true
}

// GET /v1/entities/{type}/{id} → 200 entity.
func (s *Server) getEntity(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := s.entityTarget(w, r)
	if !ok {
		return
	}
	account, err := s.account()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	e, err := s.store.GetEntity(account, typ, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, entityAnswer{Entity: e})
}

// GET /v1/entities/{type}?syncState=&limit=&after= → 200 {items, next}.
func (s *Server) listEntities(w http.ResponseWriter, r *http.Request) {
	typ, err := entityTypeParam(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	opts, err := entityListOptions(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.lookupType(r, typ); err != nil {
		s.fail(w, r, err)
		return
	}
	account, err := s.account()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items, next, err := s.store.ListEntities(account, typ, opts)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ans := listAnswer[entityAnswer]{Items: make([]entityAnswer, len(items)), Next: next}
	for i, e := range items {
		ans.Items[i] = entityAnswer{Entity: e}
	}
	writeJSON(w, http.StatusOK, ans)
}

func entityListOptions(r *http.Request) (queue.ListOptions, error) {
	q, err := query(r, "syncState", "limit", "after")
	if err != nil {
		return queue.ListOptions{}, err
	}
	var opts queue.ListOptions
	switch st := queue.SyncState(q.Get("syncState")); st {
	case "", queue.SyncPending, queue.SyncSynced, queue.SyncFailed, queue.SyncConflict, queue.SyncStale:
		opts.SyncState = st
	default:
		return opts, badRequest(CodeInvalidRequest, fmt.Sprintf("syncState must be pending, synced, failed, conflict or stale, got %q", st))
	}
	if opts.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return opts, err
	}
	if after := q.Get("after"); after != "" {
		if validID(after, queue.ValidateEntityID) != nil {
			return opts, badRequest(CodeInvalidRequest, "after must be an entity id from a previous page's next")
		}
		opts.After = after
	}
	return opts, nil
}

// resolveAnswer is the answer to a resolve: the entity as it is now, and
// the operation the resolution queued (none when taking the server's
// record). Removed is set when the entity left the store (the server
// deleted it and that was taken, or both sides deleted it).
type resolveAnswer struct {
	queue.Entity
	OperationID string `json:"operationId,omitempty"`
	Removed     bool   `json:"removed,omitempty"`
}

// POST /v1/entities/{type}/{id}/resolve → 200 the entity. The body is
// one of {"take":"server"|"local"}, {"paths":{"/title":"local",
// "/done":"server"}} (a side for each field in conflict; this device's
// other changes are kept) or {"data":{...}} (the merged data). Only an
// entity in conflict can be resolved (409 no_conflict otherwise).
func (s *Server) resolveEntity(w http.ResponseWriter, r *http.Request) {
	typ, id, err := entityPath(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var res queue.Resolution
	fTake := &field{name: "take", dst: &res.Take}
	fPaths := &field{name: "paths", dst: &res.Paths}
	fData := &field{name: "data", dst: &res.Data}
	if _, err := s.parseWrite(r, fTake, fPaths, fData); err != nil {
		s.fail(w, r, err)
		return
	}
	given := 0
	for _, f := range []*field{fTake, fPaths, fData} {
		if f.present {
			given++
		}
	}
	switch {
	case given != 1:
		s.fail(w, r, badRequest(CodeInvalidRequest, `give one of "take", "paths" or "data"`))
		return
	case fTake.present && res.Take != queue.TakeServer && res.Take != queue.TakeLocal:
		s.fail(w, r, badRequest(CodeInvalidRequest, `take must be "server" or "local"`))
		return
	case fPaths.present && res.Paths == nil:
		s.fail(w, r, badRequest(CodeInvalidRequest, `paths must be an object mapping each field in conflict to "local" or "server"`))
		return
	case fData.present && (len(res.Data) == 0 || res.Data[0] != '{'):
		s.fail(w, r, badRequest(CodeInvalidRequest, "data must be a JSON object"))
		return
	}
	take := res.Take
	switch {
	case fPaths.present:
		take = "paths"
	case fData.present:
		take = "data"
	}
	if err := s.lookupType(r, typ); err != nil {
		s.fail(w, r, err)
		return
	}
	var (
		e       queue.Entity
		removed bool
	)
	g := callerOf(r)
	err = g.commit(func() error {
		return s.d.AccountWrite(func(account string) error {
			e, removed, err = s.store.ResolveWith(r.Context(), account, typ, id, res, g.appName())
			return err
		})
	})
	if errors.Is(err, daemon.ErrNoSession) {
		err = errNoSession
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.d.Notify()
	s.auditApp(r, "resolve take="+take, "entity", typ+"/"+id)
	ans := resolveAnswer{Entity: e, Removed: removed}
	if e.SyncState == queue.SyncPending && !removed {
		ans.OperationID = e.LastOperationID
	}
	writeJSON(w, http.StatusOK, ans)
}

// GET /v1/entities/{type}/{id}/versions → 200 {"items": [...]}: the
// versions the remote keeps of the entity's record, newest first, each
// {version, data, deleted, operationId, updatedAt}: an edit overwritten
// or resolved away can be found again there. Read from the remote at
// each call; nothing local changes.
func (s *Server) entityVersions(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := s.entityTarget(w, r)
	if !ok {
		return
	}
	vs, err := s.d.Versions(r.Context(), typ, id)
	if errors.Is(err, daemon.ErrNoSession) {
		err = errNoSession
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if vs == nil {
		vs = []transport.Version{}
	}
	writeJSON(w, http.StatusOK, struct {
		Items []transport.Version `json:"items"`
	}{vs})
}

// refreshAnswer is the answer to a refresh: the entity as it is now.
// Removed is set when it left the store (the server holds nothing under
// the id, and nothing local waited to be sent).
type refreshAnswer struct {
	queue.Entity
	Removed bool `json:"removed,omitempty"`
}

// POST /v1/entities/{type}/{id}/refresh → 200 the entity. Reads the
// server's record of the entity again (the remote's single-record read)
// and settles the local entity with it: a synced or stale entity takes
// it; unsent local changes stay, the record beside them; nothing on the
// server removes a synced entity. 503 remote_unavailable when the read
// fails (nothing changed), 501 refresh_unsupported when the remote has
// no such read.
func (s *Server) refreshEntity(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := s.entityTarget(w, r)
	if !ok {
		return
	}
	var (
		e       queue.Entity
		removed bool
	)
	err := callerOf(r).commit(func() error {
		var err error
		e, removed, err = s.d.Refresh(r.Context(), typ, id)
		return err
	})
	if errors.Is(err, daemon.ErrNoSession) {
		err = errNoSession
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.auditApp(r, "refresh", "entity", typ+"/"+id)
	writeJSON(w, http.StatusOK, refreshAnswer{Entity: e, Removed: removed})
}
