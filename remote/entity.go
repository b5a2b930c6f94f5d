package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/google/uuid"
)

// Entity is one record of the reference server, as its routes answer it.
type Entity struct {
	ID             string          `json:"id"` // server-generated UUID
	ClientID       string          `json:"clientId"`
	Type           string          `json:"type"`
	Data           json.RawMessage `json:"data"`
	PayloadVersion int64           `json:"payloadVersion"`
	CreatedAt      time.Time       `json:"createdAt"`
	UpdatedAt      time.Time       `json:"updatedAt"`
	// Deleted entities are kept as tombstones: GET shows them, an update
	// answers 410, a create with their clientId brings them back.
	Deleted   bool       `json:"deleted,omitempty"`
	DeletedAt *time.Time `json:"deletedAt,omitempty"`
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

func decodeBody(r *http.Request, v any) string {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		return "the body must be a JSON object: " + err.Error()
	}
	if dec.More() {
		return "the body must be one JSON object"
	}
	return ""
}

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

// handleUpdate: PATCH /v1/{type}/{id} {data, payloadVersion} replaces
// data. A payloadVersion lower than the stored one is ignored: 200 with
// the current entity.
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
	data, msg := validData(req.Data)
	if msg != "" {
		writeError(w, r, http.StatusBadRequest, CodeValidation, msg)
		return
	}
	var gone bool
	e, err := s.store.update(r.Context(), actor, typ, r.PathValue("id"), func(e *Entity) bool {
		if e.Deleted {
			gone = true
			return false
		}
		if req.PayloadVersion < e.PayloadVersion {
			return false
		}
		e.Data, e.PayloadVersion, e.UpdatedAt = data, req.PayloadVersion, s.now()
		return true
	})
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no "+typ+" with this id")
	case err != nil:
		s.internal(w, r, err)
	case gone:
		writeError(w, r, http.StatusGone, CodeGone, "this "+typ+" was deleted")
	default:
		writeJSON(w, http.StatusOK, e)
	}
}

// handleDelete: DELETE /v1/{type}/{id} marks the entity deleted and
// answers it; deleting a deleted entity answers it again.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathType(w, r)
	if !ok {
		return
	}
	actor, _ := ActorFromContext(r.Context())
	e, err := s.store.update(r.Context(), actor, typ, r.PathValue("id"), func(e *Entity) bool {
		if e.Deleted {
			return false
		}
		now := s.now()
		e.Deleted, e.DeletedAt, e.UpdatedAt = true, &now, now
		return true
	})
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no "+typ+" with this id")
	case err != nil:
		s.internal(w, r, err)
	default:
		writeJSON(w, http.StatusOK, e)
	}
}

// handleGet: GET /v1/{type}/{id}.
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
		writeJSON(w, http.StatusOK, e)
	}
}

// listLimit caps GET /v1/{type} without clientId.
const listLimit = 1000

// handleList: GET /v1/{type}?clientId=X answers {"items":[...]}: the
// entity with that clientId (zero or one), or without clientId the
// actor's entities of the type, at most 1000.
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
	writeJSON(w, http.StatusOK, struct {
		Items []Entity `json:"items"`
	}{items})
}
