package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/syncd/syncd/localapi/client"
)

// FuzzEventFrame: any frame of the event stream that decodes as an event
// (as the client's ReadJSON does) prints, in syncd events' human form,
// as one line of printable text starting with its seq (nothing a daemon
// or a server put in a field can break the line or reach the terminal
// as a control sequence); and its --json form is one line that reads
// back as the same event.
func FuzzEventFrame(f *testing.F) {
	for _, s := range []string{
		`{"seq":1,"time":"2026-12-02T10:00:00Z","type":"entity.changed","entityType":"notes","entityId":"n1","syncState":"synced"}`,
		`{"seq":2,"time":"2026-12-02T10:00:00.5+02:00","type":"operation.state","entityType":"notes","entityId":"n1","operationId":"op-1","state":"permanent_failed","errorCode":"validation","mergedInto":"op-2","app":"web"}`,
		`{"seq":3,"type":"queue.totals","data":{"counts":{"pending":2,"done":1},"accountId":"alice","accountCounts":{"pending":1}}}`,
		`{"seq":4,"type":"queue.totals","data":[1]}`,
		`{"seq":5,"type":"connectivity.changed","data":{"online":true}}`,
		`{"seq":6,"type":"session.changed","accountId":"bob"}`,
		`{"seq":7,"type":"resync"}`,
		`{"seq":8,"type":"custom","accountId":"a","data":{` + "\n" + `  "pretty": "printed"` + "\n" + `}}`,
		`{"seq":9,"type":"operation.state","errorCode":"bad\u001b[31mred\nline"}`,
		`{"seq":10,"type":"entity.changed\r","entityId":"\u0000\u2028"}`,
		`{"seq":18446744073709551615,"time":"0001-01-01T00:00:00Z","type":""}`,
		`{"seq":-1}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var e client.Event
		if json.Unmarshal(frame, &e) != nil {
			return
		}
		line := eventLine(e)
		if !utf8.ValidString(line) || strings.IndexFunc(line, unicode.IsControl) >= 0 || strings.ContainsAny(line, "\u2028\u2029") {
			t.Fatalf("event %+v prints as %q", e, line)
		}
		if fields := strings.Fields(line); len(fields) == 0 || fields[0] != strconv.FormatUint(e.Seq, 10) {
			t.Fatalf("event %+v prints as %q, not from its seq", e, line)
		}

		b := eventJSON(e)
		if !bytes.HasSuffix(b, []byte("\n")) || bytes.ContainsAny(b[:len(b)-1], "\r\n") {
			t.Fatalf("--json of %+v: %q", e, b)
		}
		var back client.Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("--json %q reads back: %v", b, err)
		}
		if !back.Time.Equal(e.Time) {
			t.Fatalf("--json %q reads back at %v, not %v", b, back.Time, e.Time)
		}
		back.Time = e.Time
		var compact bytes.Buffer
		if len(e.Data) > 0 {
			json.Compact(&compact, e.Data)
			e.Data = compact.Bytes()
		}
		if string(e.Data) == "null" {
			e.Data = nil // omitempty drops it... as json.RawMessage("null")
		}
		if !reflect.DeepEqual(back, e) {
			t.Fatalf("--json %q reads back as %+v, not %+v", b, back, e)
		}
	})
}
