package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/config"
)

// FuzzConfig: a config file and one SYNCD_* variable never make Resolve
// panic; what it refuses is ErrInvalid or ErrUnknownKey; and what it
// accepts survives --print-config: the printed file, read as the config
// file, and the same settings given as SYNCD_* variables, resolve to
// settings that print the same.
func FuzzConfig(f *testing.F) {
	for _, s := range []struct{ file, env, val string }{
		{`{}`, "", ""},
		{`{"listen":"127.0.0.1:1001","concurrency":2,"requestTimeout":"11s","logLevel":"debug","allowedOrigins":["http://file:1"],"entityTypes":["note"]}`, "SYNCD_CONCURRENCY", "3"},
		{`{"remote":"https://api.example.com/app","batch":"on","pull":"off","maxQueueBytes":1048576}`, "SYNCD_ALLOWED_HOSTS", "box.lan, 192.168.1.10"},
		{`{"allowedHosts":["syncd-box.lan"],"listen":"0.0.0.0:7777","forceListen":true}`, "SYNCD_REQUEST_TIMEOUT", "1h2m3.5s"},
		{`{"maxDataBytes":10,"maxBodyBytes":11,"socket":"off"}`, "SYNCD_MAX_BODY_BYTES", "12"},
		{`{"concurrency":1.5}`, "", ""},
		{`{"unknown":1}`, "", ""},
		{`[]`, "SYNCD_LOG_LEVEL", "loud"},
		{`{"requestTimeout":"-1s"}`, "SYNCD_FORCE_LISTEN", "maybe"},
		{`{"remote":"HTTP://Example.COM:80/a%20b"}`, "SYNCD_REMOTE", "http://user:pw@x/?token=1"},
		{`{"doneRetention":"9223372036854775807ns","entityTypes":[]}`, "SYNCD_ENTITY_TYPES", ",note,,task,"},
	} {
		f.Add([]byte(s.file), s.env, s.val)
	}
	f.Fuzz(func(t *testing.T, file []byte, name, val string) {
		dir := t.TempDir()
		path := filepath.Join(dir, "syncd.json")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		e := env{"HOME": dir, "SYNCD_DATA_DIR": filepath.Join(dir, "data")}
		if strings.HasPrefix(name, "SYNCD_") && name != config.EnvConfig {
			e[name] = val
		}
		l, err := config.ResolveFile(path, config.User, e.get)
		if err != nil {
			if !errors.Is(err, config.ErrInvalid) && !errors.Is(err, config.ErrUnknownKey) {
				t.Fatalf("refused with %v, neither ErrInvalid nor ErrUnknownKey", err)
			}
			return
		}
		printed := print(t, l.Settings)

		// The printed file is a config file meaning the same.
		again := filepath.Join(dir, "printed.json")
		if err := os.WriteFile(again, printed, 0o600); err != nil {
			t.Fatal(err)
		}
		l2, err := config.ResolveFile(again, config.User, env{"HOME": dir}.get)
		if err != nil {
			t.Fatalf("the printed config is refused: %v\n%s", err, printed)
		}
		if p2 := print(t, l2.Settings); !bytes.Equal(p2, printed) {
			t.Fatalf("the printed config read back prints\n%s\nwant\n%s", p2, printed)
		}

		// The same settings as SYNCD_* variables mean the same.
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(printed, &obj); err != nil {
			t.Fatalf("printed config is not a JSON object: %v", err)
		}
		ev := env{"HOME": dir}
		for k, raw := range obj {
			var text string
			var list []string
			switch {
			case json.Unmarshal(raw, &text) == nil:
			case json.Unmarshal(raw, &list) == nil:
				text = strings.Join(list, ",")
			default:
				text = string(raw)
			}
			if text != "" { // an empty variable is no variable
				ev[envName(k)] = text
			}
		}
		l3, err := config.ResolveFile("", config.User, ev.get)
		if err != nil {
			t.Fatalf("the printed config as variables %v is refused: %v", ev, err)
		}
		if p3 := print(t, l3.Settings); !bytes.Equal(p3, printed) {
			t.Fatalf("the printed config as variables prints\n%s\nwant\n%s", p3, printed)
		}
	})
}

func print(t *testing.T, s config.Settings) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := config.WriteJSON(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// envName is config's: dataDir → SYNCD_DATA_DIR.
func envName(key string) string {
	var b strings.Builder
	b.WriteString("SYNCD_")
	for _, r := range key {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteString(strings.ToUpper(string(r)))
	}
	return b.String()
}
