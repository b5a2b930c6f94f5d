package client

import (
	"context"
	"net/http"
	"time"
)

// UILink is a one-time sign-in link to syncd's status page.
type UILink struct {
	// URL opens the page in a browser on this machine: a GET of it
	// within ExpiresAt, once, signs the browser in.
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// UILink makes a sign-in link to the status page, valid once for a
// minute (admin token only; POST /v1/ui/links). A daemon whose page is
// turned off (ui: off) answers not_found.
func (c *Client) UILink(ctx context.Context) (UILink, error) {
	var l UILink
	_, err := c.do(ctx, http.MethodPost, "/v1/ui/links", nil, nil, nil, &l)
	return l, err
}

// StatusHistory is the queue's recent history, sampled by the daemon in
// memory (GET /v1/status/history).
type StatusHistory struct {
	IntervalSeconds int            `json:"interval_seconds"`
	Samples         []StatusSample `json:"samples"`
}

// StatusSample is one sample of StatusHistory.
type StatusSample struct {
	At time.Time `json:"at"`
	// Queued is the operations not done; Pending and Failed those in
	// states pending and permanent_failed.
	Queued  int `json:"queued"`
	Pending int `json:"pending"`
	Failed  int `json:"failed"`
	// Sent is the operations that reached done since the sample before.
	Sent int `json:"sent"`
}

// StatusHistory reads the last hour of samples, oldest first (admin
// token only).
func (c *Client) StatusHistory(ctx context.Context) (StatusHistory, error) {
	var h StatusHistory
	_, err := c.do(ctx, http.MethodGet, "/v1/status/history", nil, nil, nil, &h)
	return h, err
}
