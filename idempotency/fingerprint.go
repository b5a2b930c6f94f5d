package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// Fingerprint returns the hex SHA-256 of the canonical JSON of
// {"method", "route", "body"}, where body is the request body parsed as
// JSON with the top-level fields named in exclude removed. The gate
// refuses, before it fingerprints, JSON that would lose information here
// (invalid UTF-8, lone surrogates, repeated names). Canonical JSON
// has object keys sorted, no insignificant whitespace, strings re-escaped
// one way and numbers kept as written (so 1 and 1.0 differ). A body that
// is not a single JSON value is fingerprinted by the SHA-256 of its raw
// bytes instead; an empty body counts as null.
func Fingerprint(method, route string, body []byte, exclude []string) string {
	env := map[string]any{"method": strings.ToUpper(method), "route": route}
	if v, ok := parseJSON(body); ok {
		if obj, isObj := v.(map[string]any); isObj {
			for _, f := range exclude {
				delete(obj, f)
			}
		}
		env["body"] = v
	} else {
		sum := sha256.Sum256(body)
		env["rawBody"] = hex.EncodeToString(sum[:])
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		// Values decoded by encoding/json always encode again.
		panic("idempotency: canonical JSON: " + err.Error())
	}
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return hex.EncodeToString(sum[:])
}

// parseJSON decodes body as exactly one JSON value, keeping numbers as
// written. An empty (or all-space) body is null.
func parseJSON(body []byte) (any, bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return v, true
}

// keyHash is the short hash of an idempotency key that goes into logs in
// place of the key itself.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
