package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Conflicts and their resolution (docs/localapi.md, "Conflicts"). An
// entity in state "conflict" carries the server's record (Entity.Server)
// and, when the server named the fields both sides changed (a merging
// server), Entity.Conflict. Nothing is sent for the entity until the app
// settles it with Resolve, ResolvePaths or ResolveData; Versions reads
// the versions the server keeps of its record, where an edit resolved
// away can be found again.

// Sides of a conflict: Resolve's take, and the values of ResolvePaths'
// sides.
const (
	TakeServer = "server"
	TakeLocal  = "local"
)

// Conflict is an entity's conflict field by field (Entity.Conflict).
type Conflict struct {
	// Paths are the fields both this device and another changed: only
	// those, each with its value at the base version, here and on the
	// server.
	Paths []ConflictPath `json:"paths"`
}

// ConflictPath is one field in conflict. A value is nil where the field
// does not exist on that side (a JSON null is the four bytes null);
// Base is nil too when the server no longer keeps the base version
// (BaseKnown is false).
type ConflictPath struct {
	// Path is the field, a JSON pointer such as /title or
	// /address/city: a key of ResolvePaths' sides.
	Path string `json:"path"`
	// Base is the field's value at the version this device's change was
	// made on.
	Base      json.RawMessage `json:"base,omitempty"`
	BaseKnown bool            `json:"baseKnown"`
	// Local is the field's value on this device, Server on the server.
	Local  json.RawMessage `json:"local,omitempty"`
	Server json.RawMessage `json:"server,omitempty"`
}

// Resolve settles an entity in conflict whole: take TakeServer (the
// local entity becomes the server's record, or is removed if the server
// deleted it; the local changes are dropped) or TakeLocal (this device's
// changes are sent again, on the server's current version; in a conflict
// field by field, its changed fields laid over the server's record, not
// the whole local data). The answer's OperationID names the operation
// queued, if any; Removed says the entity left the store. Errors:
// no_conflict (409), invalid_request (400).
func (c *Client) Resolve(ctx context.Context, typ, id, take string) (Entity, error) {
	return c.resolve(ctx, typ, id, map[string]string{"take": take})
}

// ResolvePaths settles a conflict field by field (Entity.Conflict): sides
// maps each field in conflict, by its path, to TakeLocal or TakeServer;
// this device's changes to the other fields are kept. What keeps
// something of this device goes out as an update on the server's current
// version (the answer's OperationID); a choice that keeps nothing of it
// is a take of the server's record. A field not in conflict, one in
// conflict left out, or an entity whose conflict is of the whole record
// is invalid_request (400); an entity not in conflict no_conflict (409).
func (c *Client) ResolvePaths(ctx context.Context, typ, id string, sides map[string]string) (Entity, error) {
	return c.resolve(ctx, typ, id, map[string]any{"paths": sides})
}

// ResolveData settles an entity in conflict with the data the app merged
// itself: data must marshal to a JSON object (a json.RawMessage is sent
// as it is). It goes out as an update on the server's current version,
// naming the fields in which it differs from the server's record (the
// answer's OperationID); data equal to the server's record is a take of
// it. Errors: invalid_request (400) for data that is not an object or
// passes the data limit, no_conflict (409).
func (c *Client) ResolveData(ctx context.Context, typ, id string, data any) (Entity, error) {
	return c.resolve(ctx, typ, id, map[string]any{"data": data})
}

func (c *Client) resolve(ctx context.Context, typ, id string, body any) (Entity, error) {
	var e Entity
	_, err := c.do(ctx, http.MethodPost, "/v1/entities/"+esc(typ)+"/"+esc(id)+"/resolve", nil, body, nil, &e)
	return e, err
}

// Version is one version the server keeps of an entity's record.
type Version struct {
	Version int64 `json:"version"`
	// Data is the record's data at this version; nil for a deletion.
	Data    json.RawMessage `json:"data,omitempty"`
	Deleted bool            `json:"deleted,omitempty"`
	// OperationID is the Idempotency-Key of the write that made this
	// version: an Operation's ID when this device made it.
	OperationID string    `json:"operationId,omitempty"`
	UpdatedAt   time.Time `json:"updatedAt,omitzero"`
}

// Versions reads the versions the server keeps of the entity's record,
// newest first (GET /v1/entities/{type}/{id}/versions): an edit
// overwritten or resolved away can be found there and written again.
// syncd reads them from the server at each call; nothing local changes.
// Errors: not_on_server (409) while the entity's create is unanswered,
// versions_unsupported (501) when the server keeps no history of it,
// remote_unavailable (503) when the read failed.
func (c *Client) Versions(ctx context.Context, typ, id string) ([]Version, error) {
	var l struct {
		Items []Version `json:"items"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/entities/"+esc(typ)+"/"+esc(id)+"/versions", nil, nil, nil, &l)
	return l.Items, err
}
