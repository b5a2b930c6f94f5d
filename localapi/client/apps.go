package client

import (
	"context"
	"net/http"
	"time"
)

// App is an app registered with syncd: the entity types its token may
// read, and write unless ReadOnly. Token is set only in AddApp's answer:
// syncd keeps the token's digest, never the token.
type App struct {
	Name      string    `json:"name"`
	Types     []string  `json:"types"`
	ReadOnly  bool      `json:"readOnly"`
	CreatedAt time.Time `json:"createdAt"`
	Token     string    `json:"token,omitempty"`
}

// AddApp registers an app and returns it with its token, which is shown
// this once (admin token only).
func (c *Client) AddApp(ctx context.Context, name string, types []string, readOnly bool) (App, error) {
	var a App
	body := map[string]any{"name": name, "types": types, "readOnly": readOnly}
	_, err := c.do(ctx, http.MethodPost, "/v1/apps", nil, body, nil, &a)
	return a, err
}

// Apps lists the registered apps, without tokens (admin token only).
func (c *Client) Apps(ctx context.Context) ([]App, error) {
	var l List[App]
	_, err := c.do(ctx, http.MethodGet, "/v1/apps", nil, nil, nil, &l)
	return l.Items, err
}

// RemoveApp removes an app: its token is refused from the next request
// on and its event streams are closed (admin token only).
func (c *Client) RemoveApp(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/apps/"+esc(name), nil, nil, nil, nil)
	return err
}
