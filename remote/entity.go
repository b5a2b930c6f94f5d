package remote

import (
	"bytes"
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
}

// operationKey is the request's Idempotency-Key, as the gate reads it.
func operationKey(r *http.Request) string {
	k := strings.TrimSpace(r.Header.Get(idempotency.HeaderKey))
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	return k
}

// conflictAnswer is the 409 version_conflict body: the error and the
// record as the server holds it.
type conflictAnswer struct {
	Error   errorBody `json:"error"`
	Current *Entity   `json:"current"`
}

// refuses reports whether the type's conflict policy refuses a write made
// on base when the record is at current: policy reject, a base given and
// below the current version.
func (s *Server) refuses(typ string, base *int64, current int64) bool {
	return base != nil && *base < current && (s.reject[typ] || s.reject["*"])
}

func (s *Server) writeConflict(w http.ResponseWriter, typ string, e *Entity) {
	writeJSON(w, http.StatusConflict, conflictAnswer{
		Error:   errorBody{Code: CodeVersionConflict, Message: "this " + typ + " changed since the version the change was made on; the current record is in \"current\""},
		Current: e,
	})
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
	if existing != nil {
		writeJSON(w, http.StatusOK, existing)
		return
	}
	w.Header().Set("Location", "/v1/"+typ+"/"+e.ID)
	writeJSON(w, http.StatusCreated, e)
}

// handleUpdate: PATCH /v1/{type}/{id} {data, payloadVersion,
// baseVersion?} replaces data and bumps the version. Last writer wins,
// in arrival order; for a type whose policy is reject, a baseVersion
// below the current version answers 409 version_conflict with the
// current record. (payloadVersion no longer decides anything: a second
// device counts its own versions, and ignoring its lower one dropped its
// edit silently.)
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
	var gone, conflict bool
	key := operationKey(r)
	e, err := s.store.update(r.Context(), actor, typ, r.PathValue("id"), func(e *Entity) bool {
		if e.Deleted {
			gone = true
			return false
		}
		if s.refuses(typ, req.BaseVersion, e.Version) {
			conflict = true
			return false
		}
		e.Data, e.PayloadVersion, e.UpdatedAt = data, req.PayloadVersion, s.now()
		e.Version++
		e.OperationID = key
		return true
	})
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no "+typ+" with this id")
	case err != nil:
		s.internal(w, r, err)
	case gone:
		writeError(w, r, http.StatusGone, CodeGone, "this "+typ+" was deleted")
	case conflict:
		s.writeConflict(w, typ, e)
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
	var conflict bool
	e, err := s.store.update(r.Context(), actor, typ, r.PathValue("id"), func(e *Entity) bool {
		if e.Deleted {
			return false
		}
		if s.refuses(typ, base, e.Version) {
			conflict = true
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
	case err != nil:
		s.internal(w, r, err)
	case conflict:
		s.writeConflict(w, typ, e)
	default:
		writeJSON(w, http.StatusOK, e.shown())
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
