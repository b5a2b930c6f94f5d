package convergence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// httpClient talks to the daemons' local APIs and the server replicas.
// Every request has a deadline: a wedged process fails the run instead
// of hanging it.
var httpClient = &http.Client{Timeout: 20 * time.Second}

// call sends one request and decodes the JSON answer (nil if none).
func call(method, u, token, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, nil, err
	}
	var m map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return res.StatusCode, nil, fmt.Errorf("%s %s: %d %v: %.200s", method, u, res.StatusCode, err, raw)
		}
	}
	return res.StatusCode, m, nil
}

func jsonBody(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// canonical is v as JSON with sorted keys (encoding/json sorts map keys).
func canonical(v any) string {
	if raw, ok := v.(json.RawMessage); ok {
		var x any
		if err := json.Unmarshal(raw, &x); err != nil {
			return string(raw)
		}
		v = x
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func errCode(m map[string]any) string {
	if e, ok := m["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

// errText is an error answer's code and message.
func errText(m map[string]any) string {
	if e, ok := m["error"].(map[string]any); ok {
		return fmt.Sprintf("%s (%v)", e["code"], e["message"])
	}
	return ""
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// feedRecord is one record of the server's changes feed, at its latest
// version.
type feedRecord struct {
	Type     string          `json:"type"`
	ID       string          `json:"id"`
	ClientID string          `json:"clientId"`
	Version  int64           `json:"version"`
	Deleted  bool            `json:"deleted"`
	Data     json.RawMessage `json:"data"`
}

// readFeed reads the account's whole feed from the beginning: every
// record the server keeps (live ones and tombstones), keyed by
// type/clientId, each at its latest version.
func readFeed(server, token string) (map[string]feedRecord, error) {
	recs := map[string]feedRecord{}
	cursor := ""
	for range 10000 {
		req, _ := http.NewRequest("GET", server+"/v1/changes?limit=1000&after="+url.QueryEscape(cursor), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := httpClient.Do(req)
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return nil, err
		}
		if res.StatusCode != 200 {
			return nil, fmt.Errorf("GET /v1/changes after %q: %d %.300s", cursor, res.StatusCode, raw)
		}
		var page struct {
			Changes []feedRecord `json:"changes"`
			Cursor  string       `json:"cursor"`
			HasMore bool         `json:"hasMore"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, err
		}
		for _, c := range page.Changes {
			k := c.Type + "/" + c.ClientID
			if old, ok := recs[k]; !ok || old.ID != c.ID || c.Version >= old.Version {
				recs[k] = c
			}
		}
		cursor = page.Cursor
		if !page.HasMore {
			return recs, nil
		}
	}
	return nil, fmt.Errorf("feed: more than 10,000 pages")
}

// event is one event of the daemon's change log.
type event struct {
	Seq         uint64 `json:"seq"`
	Type        string `json:"type"`
	EntityType  string `json:"entityType"`
	EntityID    string `json:"entityId"`
	OperationID string `json:"operationId"`
	State       string `json:"state"`
	SyncState   string `json:"syncState"`
	ErrorCode   string `json:"errorCode"`
}

// readEvents reads the daemon's retained events from the beginning up
// to seq upTo. resync says the log no longer holds the oldest ones.
func readEvents(base, token string, upTo uint64) (evs []event, resync bool, err error) {
	if upTo == 0 {
		return nil, false, nil
	}
	u := "ws" + strings.TrimPrefix(base, "http") + "/v1/events?since=0"
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, res, err := d.Dial(u, h)
	if err != nil {
		if res != nil {
			return nil, false, fmt.Errorf("events: %v (%d)", err, res.StatusCode)
		}
		return nil, false, fmt.Errorf("events: %v", err)
	}
	defer c.Close()
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, msg, err := c.ReadMessage()
		if err != nil {
			return evs, resync, fmt.Errorf("events: after %d events: %v", len(evs), err)
		}
		var e event
		if err := json.Unmarshal(msg, &e); err != nil {
			return evs, resync, err
		}
		if e.Type == "resync" {
			resync = true
		} else {
			evs = append(evs, e)
		}
		if e.Seq >= upTo {
			return evs, resync, nil
		}
	}
}
