package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Reading one record: GET {BaseURL}/v1/{type}?clientId=<local id> →
// 200 {"items": [record]} with the record at its latest version (a
// deleted one as a tombstone: "deleted": true), or {"items": []} when
// the server holds nothing under the client id (never created, or
// deleted and swept). A record has the fields of a Change: id,
// clientId, version, deleted, data. The daemon's refresh of an entity
// uses it (docs/server.md, "Reading one record").

// ErrNoRecordRead: the remote answered 404 for the read, or something
// else than a list of records: it cannot read one record.
var ErrNoRecordRead = errors.New("transport: the remote cannot read one record")

// Record reads the server's record of entityType under clientID for the
// account whose token is given: nil when the server holds nothing under
// it. A 401 is ErrUnauthorized, a 404 ErrNoRecordRead; any other
// failure is an error worth retrying later.
func (c *Client) Record(ctx context.Context, token, entityType, clientID string) (*Change, error) {
	if entityType == "" || clientID == "" {
		return nil, fmt.Errorf("transport: record: %w: no entity type or id", ErrInvalidRequest)
	}
	target := c.baseURL + "/v1/" + url.PathEscape(entityType) + "?" + url.Values{"clientId": {clientID}}.Encode()
	body, err := c.getRead(ctx, "record", token, target, c.maxBody*4, ErrNoRecordRead)
	if err != nil {
		return nil, err
	}
	var ans struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || ans.Items == nil {
		return nil, fmt.Errorf("%w: GET /v1/%s?clientId= answered 200 without an items list", ErrNoRecordRead, entityType)
	}
	for _, raw := range ans.Items {
		var rec Change
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("transport: record: %w: %v", ErrInvalidResponse, err)
		}
		if rec.ClientID != clientID {
			// A server that ignores the filter lists other records: its
			// answer says nothing of this one, and taking it as "none"
			// would remove the entity.
			return nil, fmt.Errorf("%w: GET /v1/%s?clientId= listed another record", ErrNoRecordRead, entityType)
		}
		if rec.ID == "" || rec.Version <= 0 {
			return nil, fmt.Errorf("transport: record: the record lacks its id or version: %w", ErrInvalidResponse)
		}
		rec.Type = entityType
		if rec.Deleted {
			rec.Data = nil
		}
		return &rec, nil
	}
	return nil, nil
}

// Reading a record's history: GET {BaseURL}/v1/{type}/{serverId}/versions
// → 200 {"items": [version]}, the versions the server keeps of the
// record, newest first, each {version, data (absent from a deletion),
// deleted, operationId, updatedAt} (docs/server.md, "History").

// ErrNoVersions: the remote answered 404 for the history read: it keeps
// no history, or no record under that server id.
var ErrNoVersions = errors.New("transport: the remote keeps no versions of the record")

// maxVersionsBody bounds the history answer read: a page of versions.
const maxVersionsBody = 64

// Version is one kept version of a server record.
type Version struct {
	Version     int64           `json:"version"`
	Data        json.RawMessage `json:"data,omitempty"`
	Deleted     bool            `json:"deleted,omitempty"`
	OperationID string          `json:"operationId,omitempty"`
	UpdatedAt   time.Time       `json:"updatedAt,omitzero"`
}

// Versions reads the versions the server keeps of the record serverID of
// entityType, newest first. A 401 is ErrUnauthorized, a 404
// ErrNoVersions; any other failure is an error worth retrying later.
func (c *Client) Versions(ctx context.Context, token, entityType, serverID string) ([]Version, error) {
	if entityType == "" || serverID == "" {
		return nil, fmt.Errorf("transport: versions: %w: no entity type or server id", ErrInvalidRequest)
	}
	target := c.baseURL + "/v1/" + escapeSegment(entityType) + "/" + escapeSegment(serverID) + "/versions"
	body, err := c.getRead(ctx, "versions", token, target, c.maxBody*maxVersionsBody, ErrNoVersions)
	if err != nil {
		return nil, err
	}
	var ans struct {
		Items []Version `json:"items"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || ans.Items == nil {
		return nil, fmt.Errorf("%w: GET .../versions answered 200 without an items list", ErrNoVersions)
	}
	for i := range ans.Items {
		v := &ans.Items[i]
		if v.Version <= 0 || !v.Deleted && (len(v.Data) == 0 || v.Data[0] != '{') {
			return nil, fmt.Errorf("transport: versions: a version without its number or data: %w", ErrInvalidResponse)
		}
		if v.Deleted {
			v.Data = nil
		}
	}
	return ans.Items, nil
}

// getRead GETs target, a read of records, and returns the body of its
// 200: a 404 is notFound (the remote has no such read), a 401
// ErrUnauthorized, a body over limit ErrResponseTooLarge, another status
// ErrStatus.
func (c *Client) getRead(ctx context.Context, what, token, target string, limit int64, notFound error) ([]byte, error) {
	status, body, truncated, err := c.getJSON(ctx, what, token, target, c.timeout, limit)
	if err != nil {
		return nil, err
	}
	switch {
	case status == http.StatusOK:
	case status == http.StatusNotFound:
		return nil, notFound
	case status == http.StatusUnauthorized:
		return nil, ErrUnauthorized
	default:
		code, msg := errorBody(body)
		return nil, fmt.Errorf("transport: %s: %d %s %s: %w", what, status, code, msg, ErrStatus)
	}
	if truncated {
		return nil, fmt.Errorf("transport: %s: an answer over %d bytes: %w", what, limit, ErrResponseTooLarge)
	}
	return body, nil
}
