package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/changefeed"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// Entity is one record of the reference server, as its routes answer it.
type Entity struct {
	ID             string          `json:"id"` // server-generated UUID
	ClientID       string          `json:"clientId"`
	Type           string          `json:"type"`
	Data           json.RawMessage `json:"data,omitempty"` // absent from a tombstone's answers
	PayloadVersion int64           `json:"payloadVersion"`
	CreatedAt      time.Time       `json:"createdAt"`
	UpdatedAt      time.Time       `json:"updatedAt"`
	// Deleted entities are kept as tombstones: GET shows them (without
	// data), an update answers 410, a create with their clientId brings
	// them back.
	Deleted   bool       `json:"deleted,omitempty"`
	DeletedAt *time.Time `json:"deletedAt,omitempty"`
	// Version counts the record's applied writes: 1 at create, +1 per
	// update, delete and revival.
	Version int64 `json:"version"`
	// OperationID is the Idempotency-Key of the write that made this
	// version.
	OperationID string `json:"operationId,omitempty"`
	// seq is the record's position in its actor's changes feed, set by
	// the storage at each write.
	seq int64
	// since and paths are the record's field history for the merge
	// policy (fieldmerge.Record): the version its current life began at
	// (create, revival, a write of its whole data), and the version of
	// each path's latest change after that.
	since int64
	paths map[string]int64
}

// record is e as the merge rule reads it.
func (e *Entity) record() fieldmerge.Record {
	return fieldmerge.Record{Data: e.Data, Version: e.Version, Since: e.since, Paths: e.paths}
}

// replaced records that a write replaced e's whole data at its (new)
// version: a record-level write, a create or a revival.
func (e *Entity) replaced() { e.since, e.paths = e.Version, nil }

// Version is one kept version of a record, as
// GET /v1/{type}/{id}/versions answers it.
type Version struct {
	Version     int64           `json:"version"`
	Data        json.RawMessage `json:"data,omitempty"` // absent from a deletion
	Deleted     bool            `json:"deleted,omitempty"`
	OperationID string          `json:"operationId,omitempty"`
	UpdatedAt   time.Time       `json:"updatedAt"`
}

// historyEntry is e's current version as its history keeps it.
func (e *Entity) historyEntry() Version {
	h := Version{Version: e.Version, Deleted: e.Deleted, OperationID: e.OperationID, UpdatedAt: e.UpdatedAt}
	if !e.Deleted {
		h.Data = e.Data
	}
	return h
}

// shown is the entity as the routes answer it: a tombstone without its
// data, as the feed shows it.
func (e Entity) shown() Entity {
	if e.Deleted {
		e.Data = nil
	}
	return e
}

// change is the entity as the changes feed shows it.
func (e *Entity) change() changefeed.Change {
	c := changefeed.Change{Type: e.Type, ID: e.ID, ClientID: e.ClientID, Version: e.Version, Deleted: e.Deleted,
		UpdatedAt: e.UpdatedAt, OperationID: e.OperationID}
	if !e.Deleted {
		c.Data = e.Data
	}
	return c
}

const maxClientIDLength = 255

var typePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// createRequest is the body of POST /v1/{type}. Other fields are ignored.
type createRequest struct {
	ClientID       string          `json:"clientId"`
	Data           json.RawMessage `json:"data"`
	PayloadVersion int64           `json:"payloadVersion"`
}

// updateRequest is the body of PATCH /v1/{type}/{id}.
type updateRequest struct {
	Data           json.RawMessage `json:"data"`
	PayloadVersion int64           `json:"payloadVersion"`
	// BaseVersion is the version the client's change was made on;
	// absent: the client does not say, and the write is applied.
	BaseVersion *int64 `json:"baseVersion"`
	// Paths are the JSON pointers of the fields the change sets or
	// removes, their values taken from Data (package fieldmerge). Absent:
	// the change is the whole of Data. Only the merge policy reads them.
	Paths *[]string `json:"paths"`
}

// operationKey is the request's Idempotency-Key, as the gate reads it.
func operationKey(r *http.Request) string {
	k := strings.TrimSpace(r.Header.Get(idempotency.HeaderKey))
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	return k
}

// conflictAnswer is the 409 version_conflict body: the error, the
// record as the server holds it and, under the merge policy, the paths
// in conflict and the record at the change's base version when the
// history still holds it.
type conflictAnswer struct {
	Error   errorBody `json:"error"`
	Current *Entity   `json:"current"`
	Paths   []string  `json:"paths,omitempty"`
	Base    *Version  `json:"base,omitempty"`
}

// refuses reports whether the type's conflict policy refuses, whole, a
// write made on base when the record is at current: policy reject, or
// merge for a write that does not name its paths (a delete, an update
// of a client that does not merge), and a base given and below the
// current version.
func (s *Server) refuses(typ string, base *int64, current int64) bool {
	return base != nil && *base < current && s.policy(typ) != PolicyLWW
}

// conflict is a refused write's answer, found in the write's
// transaction.
type conflict struct {
	paths []string
	base  *Version
}

// refused makes the conflict of a write made on base: under the merge
// policy, with paths (the conflicting ones, or those changed since base)
// and the record at base, when kept.
func (s *Server) refused(ctx context.Context, typ string, e *Entity, base *int64, paths []string) (*conflict, error) {
	c := &conflict{paths: paths}
	if s.policy(typ) != PolicyMerge || base == nil {
		return c, nil
	}
	if c.paths == nil {
		c.paths = fieldmerge.ChangedSince(e.record(), *base)
	}
	if *base > 0 {
		h, ok, err := s.store.version(ctx, e.ID, *base)
		if err != nil {
			return nil, err
		}
		if ok {
			c.base = &h
		}
	}
	return c, nil
}

func (s *Server) writeConflict(w http.ResponseWriter, typ string, e *Entity, c *conflict) {
	msg := "this " + typ + " changed since the version the change was made on; the current record is in \"current\""
	ans := conflictAnswer{Current: e}
	if c != nil && len(c.paths) > 0 {
		ans.Paths, ans.Base = c.paths, c.base
		msg = "fields of this " + typ + " changed since the version the change was made on: " + fieldmerge.Quote(c.paths) + "; the current record is in \"current\""
	}
	ans.Error = errorBody{Code: CodeVersionConflict, Message: msg}
	writeJSON(w, http.StatusConflict, ans)
}

// validData checks that data is a JSON object and not marked with the
// test hook "invalid": true, and returns it compacted.
func validData(data json.RawMessage) (json.RawMessage, string) {
	var obj map[string]json.RawMessage
	if len(data) == 0 || json.Unmarshal(data, &obj) != nil || obj == nil {
		return nil, "data must be a JSON object"
	}
	if v, ok := obj["invalid"]; ok && bytes.Equal(bytes.TrimSpace(v), []byte("true")) {
		// Test hook of the reference server: lets daemon tests provoke a
		// validation failure with an otherwise valid request.
		return nil, `data is marked "invalid": true`
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, "data must be a JSON object"
	}
	return buf.Bytes(), ""
}

// decodeBody reads the body, one JSON value and nothing after it but
// space, into v. (A json.Decoder's More is false before a stray ']' or
// '}': it does not tell that nothing follows.)
func decodeBody(r *http.Request, v any) string {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return "the body must be a JSON object: " + err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		return "the body must be a JSON object: " + err.Error()
	}
	if len(bytes.TrimSpace(raw[dec.InputOffset():])) > 0 {
		return "the body must be one JSON object"
	}
	return ""
}

// msgBaseVersion refuses a baseVersion that is not a version: the
// same in a query and in a body.
const msgBaseVersion = "baseVersion must be a whole number"

// pathType returns the {type} path value, or answers 400.
func pathType(w http.ResponseWriter, r *http.Request) (string, bool) {
	t := r.PathValue("type")
	if !typePattern.MatchString(t) {
		writeError(w, r, http.StatusBadRequest, CodeValidation, "entity type must match "+typePattern.String())
		return "", false
	}
	return t, true
}

func (s *Server) now() time.Time {
	return s.cfg.Now().UTC().Truncate(time.Microsecond)
}

func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.ErrorContext(r.Context(), "remote: request failed", slog.String("route", r.Pattern), slog.Any("err", err))
	writeError(w, r, http.StatusInternalServerError, CodeInternal, "the server failed; retry later")
}

// handleCreate: POST /v1/{type} {clientId, data, payloadVersion}. A
// create whose (actor, type, clientId) names a live entity answers 200
// with it: one record ever, even after the key's record expired. A create
// whose clientId names a deleted entity brings it back under the same id
// with the new data (201): the app made the entity again.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r)
	if !ok {
		return
	}
	actor, _ := ActorFromContext(r.Context())
	var req createRequest
	if msg := decodeBody(r, &req); msg != "" {
		writeError(w, r, http.StatusBadRequest, CodeValidation, msg)
		return
	}
	if req.ClientID == "" || len(req.ClientID) > maxClientIDLength {
		writeError(w, r, http.StatusBadRequest, CodeValidation, "clientId must be a non-empty string of at most 255 bytes")
		return
	}
	data, msg := validData(req.Data)
	if msg != "" {
		writeError(w, r, http.StatusBadRequest, CodeValidation, msg)
		return
	}
	now := s.now()
	e := &Entity{
		ID: uuid.NewString(), ClientID: req.ClientID, Type: typ, Data: data,
		PayloadVersion: req.PayloadVersion, CreatedAt: now, UpdatedAt: now,
		OperationID: operationKey(r),
	}
	existing, err := s.store.create(r.Context(), actor, e)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if existing != nil && s.policy(typ) == PolicyMerge {
		s.mergeCreate(w, r, typ, actor, existing, data, req.PayloadVersion)
		return
	}
	if existing != nil {
		writeJSON(w, http.StatusOK, existing)
		return
	}
	w.Header().Set("Location", "/v1/"+typ+"/"+e.ID)
	writeJSON(w, http.StatusCreated, e)
}

// mergeCreate merges a create of a clientId that names the live record
// existing into it, as an update made on no version of it: its fields
// that the record does not hold, or holds with the same value, apply
// (200, the merged record; nothing changed: the record as it is); any
// other is a conflict (409).
func (s *Server) mergeCreate(w http.ResponseWriter, r *http.Request, typ, actor string, existing *Entity, data json.RawMessage, payloadVersion int64) {
	paths, err := fieldmerge.LeafPaths(data)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, CodeValidation, "data must be a JSON object")
		return
	}
	var c *conflict
	var ferr error
	key, zero := operationKey(r), int64(0)
	e, err := s.store.update(r.Context(), actor, typ, existing.ID, func(e *Entity) bool {
		res, err := fieldmerge.Merge(e.record(), fieldmerge.Update{Base: 0, Paths: paths, Data: data})
		if err != nil {
			ferr = err
			return false
		}
		if len(res.Conflicts) > 0 {
			c, ferr = s.refused(r.Context(), typ, e, &zero, res.Conflicts)
			return false
		}
		if len(res.Changed) == 0 {
			return false // it holds the create's data already
		}
		e.Data, e.Version, e.since, e.paths = res.Record.Data, res.Record.Version, res.Record.Since, res.Record.Paths
		e.PayloadVersion, e.UpdatedAt, e.OperationID = payloadVersion, s.now(), key
		return true
	})
	switch {
	case err == nil && ferr != nil:
		err = ferr
		fallthrough
	case err != nil:
		s.internal(w, r, err)
	case c != nil:
		s.writeConflict(w, typ, e, c)
	default:
		writeJSON(w, http.StatusOK, e)
	}
}

// handleUpdate: PATCH /v1/{type}/{id} {data, payloadVersion,
// baseVersion?, paths?} writes the record and bumps its version, as the
// type's policy says: merge (with paths) sets only the named fields,
// unless another write changed one of them after baseVersion (409
// version_conflict naming them, nothing applied); merge without paths
// and reject replace data unless baseVersion is below the current
// version (409, the whole record); lww replaces data, in arrival order.
// A path that leads through a value that is not an object in data is
// 400. (payloadVersion no longer decides anything: a second device
// counts its own versions, and ignoring its lower one dropped its edit
// silently.)
func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r)
	if !ok {
		return
	}
	actor, _ := ActorFromContext(r.Context())
	var req updateRequest
	if msg := decodeBody(r, &req); msg != "" {
		writeError(w, r, http.StatusBadRequest, CodeValidation, msg)
		return
	}
	if req.BaseVersion != nil && *req.BaseVersion < 0 {
		writeError(w, r, http.StatusBadRequest, CodeValidation, msgBaseVersion)
		return
	}
	data, msg := validData(req.Data)
	if msg != "" {
		writeError(w, r, http.StatusBadRequest, CodeValidation, msg)
		return
	}
	if req.Paths != nil && s.policy(typ) == PolicyMerge {
		// Only the merge policy reads paths: under lww and reject they
		// are ignored, whatever they hold.
		if err := fieldmerge.ParsePaths(*req.Paths); err != nil {
			writeError(w, r, http.StatusBadRequest, CodeValidation, "paths must be JSON pointers to fields: "+err.Error())
			return
		}
	}
	merging := req.Paths != nil && s.policy(typ) == PolicyMerge
	var gone bool
	var c *conflict
	var ferr error
	key := operationKey(r)
	e, err := s.store.update(r.Context(), actor, typ, r.PathValue("id"), func(e *Entity) bool {
		if e.Deleted {
			gone = true
			return false
		}
		if !merging {
			if s.refuses(typ, req.BaseVersion, e.Version) {
				c, ferr = s.refused(r.Context(), typ, e, req.BaseVersion, nil)
				return false
			}
			e.Data, e.PayloadVersion, e.UpdatedAt = data, req.PayloadVersion, s.now()
			e.Version++
			e.replaced()
			e.OperationID = key
			return true
		}
		base := e.Version // a change that names no base is made on the current version
		if req.BaseVersion != nil {
			base = *req.BaseVersion
		}
		res, err := fieldmerge.Merge(e.record(), fieldmerge.Update{Base: base, Paths: *req.Paths, Data: data})
		if err != nil {
			ferr = err
			return false
		}
		if len(res.Conflicts) > 0 {
			c, ferr = s.refused(r.Context(), typ, e, &base, res.Conflicts)
			return false
		}
		e.Data, e.Version, e.since, e.paths = res.Record.Data, res.Record.Version, res.Record.Since, res.Record.Paths
		e.PayloadVersion, e.UpdatedAt, e.OperationID = req.PayloadVersion, s.now(), key
		return true
	})
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no "+typ+" with this id")
	case err == nil && errors.Is(ferr, fieldmerge.ErrInvalidPath):
		writeError(w, r, http.StatusBadRequest, CodeValidation, "paths must name fields of data: "+ferr.Error())
	case err == nil && ferr != nil:
		err = ferr
		fallthrough
	case err != nil:
		s.internal(w, r, err)
	case gone:
		writeError(w, r, http.StatusGone, CodeGone, "this "+typ+" was deleted")
	case c != nil:
		s.writeConflict(w, typ, e, c)
	default:
		writeJSON(w, http.StatusOK, e)
	}
}

// baseVersionOf reads a delete's baseVersion: ?baseVersion=N, or a JSON
// body {"baseVersion": N}. ok is false (and the answer written) when it
// is malformed.
func baseVersionOf(w http.ResponseWriter, r *http.Request) (base *int64, ok bool) {
	if v := r.URL.Query().Get("baseVersion"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, r, http.StatusBadRequest, CodeValidation, msgBaseVersion)
			return nil, false
		}
		return &n, true
	}
	if r.ContentLength == 0 || r.Body == nil {
		return nil, true
	}
	var body struct {
		BaseVersion *int64 `json:"baseVersion"`
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, CodeValidation, "reading the body failed")
		return nil, false
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, true
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		writeError(w, r, http.StatusBadRequest, CodeValidation, "the body must be a JSON object")
		return nil, false
	}
	if body.BaseVersion != nil && *body.BaseVersion < 0 {
		writeError(w, r, http.StatusBadRequest, CodeValidation, msgBaseVersion)
		return nil, false
	}
	return body.BaseVersion, true
}

// handleDelete: DELETE /v1/{type}/{id}[?baseVersion=N] marks the entity
// deleted (a tombstone, kept for the changes feed), bumps its version
// and answers it; deleting a deleted entity answers it again. The
// type's conflict policy applies as for an update.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r)
	if !ok {
		return
	}
	base, ok := baseVersionOf(w, r)
	if !ok {
		return
	}
	actor, _ := ActorFromContext(r.Context())
	key := operationKey(r)
	var c *conflict
	var ferr error
	e, err := s.store.update(r.Context(), actor, typ, r.PathValue("id"), func(e *Entity) bool {
		if e.Deleted {
			return false
		}
		if s.refuses(typ, base, e.Version) {
			c, ferr = s.refused(r.Context(), typ, e, base, nil)
			return false
		}
		now := s.now()
		e.Deleted, e.DeletedAt, e.UpdatedAt = true, &now, now
		e.Version++
		e.OperationID = key
		return true
	})
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no "+typ+" with this id")
	case err == nil && ferr != nil:
		err = ferr
		fallthrough
	case err != nil:
		s.internal(w, r, err)
	case c != nil:
		s.writeConflict(w, typ, e, c)
	default:
		writeJSON(w, http.StatusOK, e.shown())
	}
}

// maxVersions is how many versions GET /v1/{type}/{id}/versions answers
// at most (all a record keeps, at the default history).
const maxVersions = 100

// handleVersions: GET /v1/{type}/{id}/versions answers {"items":[...]}:
// the record's kept versions, newest first, each {version, data (absent
// from a deletion), deleted, operationId, updatedAt}. A record keeps its
// latest Config.HistoryVersions versions; those older than
// Config.HistoryAge are swept, but the current one.
func (s *Server) handleVersions(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r)
	if !ok {
		return
	}
	actor, _ := ActorFromContext(r.Context())
	items, err := s.store.versions(r.Context(), actor, typ, r.PathValue("id"), maxVersions)
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no "+typ+" with this id")
	case err != nil:
		s.internal(w, r, err)
	default:
		if items == nil {
			items = []Version{}
		}
		writeJSON(w, http.StatusOK, struct {
			Items []Version `json:"items"`
		}{items})
	}
}

// handleGet: GET /v1/{type}/{id}: the record, a tombstone without data.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r)
	if !ok {
		return
	}
	actor, _ := ActorFromContext(r.Context())
	e, err := s.store.get(r.Context(), actor, typ, r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no "+typ+" with this id")
	case err != nil:
		s.internal(w, r, err)
	default:
		writeJSON(w, http.StatusOK, e.shown())
	}
}

// listLimit caps GET /v1/{type} without clientId.
const listLimit = 1000

// handleList: GET /v1/{type}?clientId=X answers {"items":[...]}: the
// entity with that clientId (zero or one), or without clientId the
// actor's entities of the type, at most 1000. With clientId it is the
// remote protocol's single-record read (the daemon's refresh): the
// record at its latest version, a tombstone as deleted with its version
// and no data, and no item when the server holds nothing under that
// client id (never created, or its tombstone swept).
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r)
	if !ok {
		return
	}
	actor, _ := ActorFromContext(r.Context())
	items, err := s.store.list(r.Context(), actor, typ, r.URL.Query().Get("clientId"), listLimit)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if items == nil {
		items = []Entity{}
	}
	for i := range items {
		items[i] = items[i].shown()
	}
	writeJSON(w, http.StatusOK, struct {
		Items []Entity `json:"items"`
	}{items})
}
