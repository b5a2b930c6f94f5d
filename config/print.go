package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"time"
)

// WriteJSON writes s as the config file would hold it, keys in a fixed
// order, durations as FormatDuration writes them ("7d", "30s"), with credentials redacted
// (Redact): the output of --print-config, and a valid config file.
// Settings hold no tokens; the API token stays in the data directory.
func WriteJSON(w io.Writer, s Settings) error {
	s.Remote = Redact(s.Remote)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, st := range table {
		var v any = st.field(&s)
		switch p := v.(type) {
		case *time.Duration:
			v = FormatDuration(*p)
		case *[]string:
			if *p == nil {
				v = []string{}
			}
		}
		val, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("config: %s: %w", st.key, err)
		}
		key, _ := json.Marshal(st.key)
		fmt.Fprintf(&b, "  %s: %s", key, val)
		if i < len(table)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// Redact hides the credentials a URL may carry: its user info (user and
// password alike, as a token is often put in the user name) and every
// query value. Text that does not parse as a URL comes back as
// "REDACTED".
func Redact(raw string) string {
	if raw == "" {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "REDACTED"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}
