package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/syncd/syncd/changefeed"
)

// The changes feed: GET {BaseURL}/v1/changes?after=&limit=&wait=, the
// server's changes to the account's records, in the order it applied
// them (DESIGN.md Part 2, "Changes feed").

// Limits of a changes request.
const (
	// DefaultChangesLimit is the page size asked for.
	DefaultChangesLimit = 500
	// MaxChangesLimit is the largest page a server is asked for.
	MaxChangesLimit = 1000
	// MaxChangesWait is the longest long poll asked for.
	MaxChangesWait = 60 * time.Second
	// ChangesPath is the feed's route, relative to Config.BaseURL.
	ChangesPath = "/v1/changes"
)

// Errors of Changes.
var (
	// ErrNoFeed: the remote answered 404: it has no changes feed. The
	// daemon keeps pushing and does not pull.
	ErrNoFeed = errors.New("transport: the remote has no changes feed")
	// ErrCursorExpired: the remote answered 410 cursor_expired: it no
	// longer keeps what the cursor needs. Read again from the beginning.
	ErrCursorExpired = errors.New("transport: changes cursor expired")
	// ErrUnauthorized: the remote refused the token (401).
	ErrUnauthorized = errors.New("transport: token refused")
)

// Change is one record of the feed, at its latest version, and
// ChangesPage one answer of it: the wire types the server side
// (package changefeed) writes.
type (
	Change      = changefeed.Change
	ChangesPage = changefeed.Page
	Progress    = changefeed.Progress
)

// Changes reads one page of the feed after cursor (empty: from the
// beginning) for the account whose token is given. wait > 0 asks the
// server to hold the request up to that long when nothing is new (a long
// poll); the request's timeout is Config.Timeout on top of it. A 404 is
// ErrNoFeed, a 410 ErrCursorExpired, a 401 ErrUnauthorized; any other
// failure is an error worth retrying later.
func (c *Client) Changes(ctx context.Context, token, cursor string, limit int, wait time.Duration) (ChangesPage, error) {
	var page ChangesPage
	limit = min(max(limit, 1), MaxChangesLimit)
	wait = min(max(wait, 0), MaxChangesWait)
	q := url.Values{}
	if cursor != "" {
		q.Set("after", cursor)
	}
	q.Set("limit", strconv.Itoa(limit))
	if wait > 0 {
		q.Set("wait", strconv.Itoa(int(wait/time.Second)))
	}
	status, body, truncated, err := c.getJSON(ctx, "changes", token, c.baseURL+ChangesPath+"?"+q.Encode(), c.timeout+wait, c.maxBody*4)
	if err != nil {
		return page, err
	}
	code, msg := "", ""
	if status != http.StatusOK {
		code, msg = errorBody(body)
	}
	switch {
	case status == http.StatusOK:
	case status == http.StatusNotFound && code != "cursor_expired":
		return page, ErrNoFeed
	case status == http.StatusGone || code == "cursor_expired":
		return page, ErrCursorExpired
	case status == http.StatusUnauthorized:
		return page, ErrUnauthorized
	default:
		return page, fmt.Errorf("transport: changes: %d %s %s: %w", status, code, msg, ErrStatus)
	}
	if truncated {
		return page, fmt.Errorf("transport: changes: a page over %d bytes: %w", c.maxBody*4, ErrResponseTooLarge)
	}
	// A 200 that is not a changes page (no "changes" array or no
	// "cursor": a catch-all route, a list of records of a type named
	// "changes") is no feed: taking it as an empty one would end a full
	// pass and remove every synced entity. A page is decoded once; a
	// body that does not decode is looked at again below to tell which.
	var wire struct {
		ChangesPage
		Cursor *string `json:"cursor"` // shadows the page's: absent is not ""
	}
	if err := json.Unmarshal(body, &wire); err == nil {
		// "changes": [] decodes to an empty slice, absent or null to nil.
		if wire.Changes == nil || wire.Cursor == nil {
			return page, fmt.Errorf("%w: GET %s answered 200 with something else than a changes page", ErrNoFeed, ChangesPath)
		}
		page = wire.ChangesPage
		page.Cursor = *wire.Cursor
		if err := checkChanges(page); err != nil {
			return ChangesPage{}, err
		}
		return page, nil
	}
	var shape struct {
		Changes json.RawMessage `json:"changes"`
		Cursor  *string         `json:"cursor"`
	}
	if err := json.Unmarshal(body, &shape); err != nil || len(shape.Changes) == 0 || shape.Changes[0] != '[' || shape.Cursor == nil {
		return page, fmt.Errorf("%w: GET %s answered 200 with something else than a changes page", ErrNoFeed, ChangesPath)
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return page, fmt.Errorf("transport: changes: %w: %v", ErrInvalidResponse, err)
	}
	if err := checkChanges(page); err != nil {
		return ChangesPage{}, err
	}
	return page, nil
}

// checkChanges refuses a page with a change that lacks what the store
// keys it by.
func checkChanges(page ChangesPage) error {
	for i, c := range page.Changes {
		if c.Type == "" || c.ClientID == "" || c.Version <= 0 {
			return fmt.Errorf("transport: changes: change %d lacks its type, clientId or version: %w", i, ErrInvalidResponse)
		}
	}
	return nil
}
