package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
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
	return fingerprint(method, route, body, exclude, "")
}

// fingerprint is Fingerprint with the media type in the envelope when
// mt is not empty.
func fingerprint(method, route string, body []byte, exclude []string, mt string) string {
	env := map[string]any{"method": strings.ToUpper(method), "route": route}
	if mt != "" {
		env["contentType"] = mt
	}
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
	return digest(env)
}

// digest is the hex SHA-256 of env's canonical JSON.
func digest(env map[string]any) string {
	b, err := encodeJSON(env)
	if err != nil {
		// Values decoded by encoding/json always encode again.
		panic("idempotency: canonical JSON: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// encodeJSON encodes v in the fingerprint's canonical form: no HTML escaping, no
// trailing newline, object keys sorted, numbers as written.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// canonicalJSON is raw in encodeJSON's form; ok is false when raw is not
// one JSON value.
func canonicalJSON(raw []byte) (string, bool) {
	v, ok := parseJSON(raw)
	if !ok {
		return "", false
	}
	b, err := encodeJSON(v)
	return string(b), err == nil
}

// FingerprintContent is the fingerprint of a request whose body has the
// given Content-Type; the gate uses it. The media type is part of the
// request: the same bytes sent as text/plain and as application/json are
// two requests, and the second is refused (422) instead of replaying the
// first's answer.
//
//   - No Content-Type, or application/json (any parameters: JSON is
//     UTF-8): Fingerprint, unchanged, so the fingerprints of JSON
//     requests stored before the media type counted still match.
//   - Another JSON type (a +json suffix, such as
//     application/merge-patch+json): the canonical JSON body, as
//     Fingerprint, and the media type.
//   - Any other type: the SHA-256 of the raw bytes and the media type
//     (lower-cased, parameters sorted), never canonicalised as JSON: a
//     text body whose white space differs is another request.
//
// An empty body has no type: its Content-Type is ignored.
func FingerprintContent(method, route, contentType string, body []byte, exclude []string) string {
	mt, isJSON := mediaType(contentType)
	if len(body) == 0 || mt == "" || mt == "application/json" {
		return Fingerprint(method, route, body, exclude)
	}
	if isJSON {
		return fingerprint(method, route, body, exclude, mt)
	}
	sum := sha256.Sum256(body)
	return digest(map[string]any{"method": strings.ToUpper(method), "route": route,
		"contentType": mt, "rawBody": hex.EncodeToString(sum[:])})
}

// mediaType returns contentType's media type in one form (lower case,
// parameters sorted; the whole value lower-cased when it does not parse)
// and whether it is a JSON type. application/json is returned without
// its parameters.
func mediaType(contentType string) (mt string, isJSON bool) {
	contentType = strings.TrimSpace(contentType)
	if contentType == "" {
		return "", true
	}
	base, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return strings.ToLower(contentType), false
	}
	isJSON = base == "application/json" || strings.HasSuffix(base, "+json")
	if base == "application/json" {
		return base, true
	}
	if cs, ok := params["charset"]; ok {
		params["charset"] = strings.ToLower(cs)
	}
	if f := mime.FormatMediaType(base, params); f != "" {
		return f, isJSON
	}
	return base, isJSON
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
