package convergence

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// SYNCD_CONVERGENCE_DEBUG=1 is for finding out why a difference
// happened: the daemons run with --log-level debug, and each difference
// is followed by what the device knows of the entity: its row (GET
// /v1/entities/{type}/{id}, with the server's record kept beside it),
// every operation of it the device still keeps, and its events (the
// entity's and its operations' states, in order, with their times). The
// server's side is the feed record the difference already shows (the
// feed keeps only the latest version of each record). Off by default.
var debugOn = os.Getenv("SYNCD_CONVERGENCE_DEBUG") == "1"

// daemonDebugArgs are the extra `syncd run` flags of debug mode.
func daemonDebugArgs() []string {
	if !debugOn {
		return nil
	}
	return []string{"--log-level", "debug"}
}

// dumpDifference returns what the device knows of the entity of d (see
// debugOn), for the test log.
func (r *run) dumpDifference(d difference) string {
	var dev *device
	for _, x := range r.c.devices {
		if x.name == d.device {
			dev = x
		}
	}
	if dev == nil || !dev.up() {
		return fmt.Sprintf("debug %s %s: the device is not running", d.device, d.key)
	}
	typ, id, _ := strings.Cut(d.key, "/")
	var b strings.Builder
	fmt.Fprintf(&b, "debug %s %s:\n", d.device, d.key)
	code, m, err := dev.call("GET", "/v1/entities/"+url.PathEscape(typ)+"/"+url.PathEscape(id), "")
	raw, _ := json.Marshal(m)
	fmt.Fprintf(&b, "  entity: %d %s %v\n", code, raw, errOrNil(err))

	ops, err := entityOps(dev, typ, id)
	fmt.Fprintf(&b, "  operations kept (%d) %v:\n", len(ops), errOrNil(err))
	for _, op := range ops {
		raw, _ := json.Marshal(op)
		fmt.Fprintf(&b, "    %s\n", raw)
	}

	code, st, err := dev.call("GET", "/v1/status", "")
	var last uint64
	if err == nil && code == 200 {
		if f, ok := st["lastEventSeq"].(float64); ok {
			last = uint64(f)
		}
	}
	evs, err := entityEvents(dev, typ, id, last)
	fmt.Fprintf(&b, "  events of the entity (%d, up to seq %d) %v:\n", len(evs), last, errOrNil(err))
	for _, e := range evs {
		fmt.Fprintf(&b, "    %s\n", e)
	}
	return b.String()
}

func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return "(error: " + err.Error() + ")"
}

// entityOps lists every operation the device keeps of one entity.
func entityOps(d *device, typ, id string) ([]map[string]any, error) {
	var out []map[string]any
	after := ""
	for range 1000 {
		q := url.Values{"limit": {"1000"}}
		if after != "" {
			q.Set("after", after)
		}
		code, m, err := d.call("GET", "/v1/operations?"+q.Encode(), "")
		if err != nil {
			return out, err
		}
		if code != 200 {
			return out, fmt.Errorf("GET /v1/operations?%s: %d %s", q.Encode(), code, errCode(m))
		}
		items, _ := m["items"].([]any)
		for _, it := range items {
			op, _ := it.(map[string]any)
			if str(op, "entityType") == typ && str(op, "entityId") == id {
				out = append(out, op)
			}
		}
		if after = str(m, "next"); after == "" {
			return out, nil
		}
	}
	return out, fmt.Errorf("operations: more than 1,000 pages")
}

// entityEvents reads the device's retained events up to seq upTo and
// keeps those of one entity (and a resync, which says older ones are
// gone), as the daemon sent them.
func entityEvents(d *device, typ, id string, upTo uint64) ([]string, error) {
	if upTo == 0 {
		return nil, nil
	}
	u := "ws" + strings.TrimPrefix(d.url, "http") + "/v1/events?since=0"
	h := map[string][]string{"Authorization": {"Bearer " + d.token}}
	dl := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	c, _, err := dl.Dial(u, h)
	if err != nil {
		return nil, fmt.Errorf("events: %v", err)
	}
	defer c.Close()
	var out []string
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, msg, err := c.ReadMessage()
		if err != nil {
			return out, fmt.Errorf("events: %v", err)
		}
		var e struct {
			Seq        uint64 `json:"seq"`
			Type       string `json:"type"`
			EntityType string `json:"entityType"`
			EntityID   string `json:"entityId"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return out, err
		}
		if e.Type == "resync" || e.EntityType == typ && e.EntityID == id {
			out = append(out, string(msg))
		}
		if e.Seq >= upTo {
			return out, nil
		}
	}
}
