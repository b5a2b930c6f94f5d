package localapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/syncd/syncd/idempotency/jsonstrict"
	"github.com/syncd/syncd/queue"
)

// Strict request parsing. Every failure is an *apiError (or the body
// limit's *http.MaxBytesError) whose message names what was wrong.

// field is one member of a JSON request object.
type field struct {
	name     string
	dst      any // pointer to decode into
	required bool
	present  bool
}

// readBody reads a request's whole body, which must be JSON.
func readBody(r *http.Request) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return nil, &apiError{http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			"Content-Type must be application/json, got " + quoteHeader(ct)}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &apiError{http.StatusRequestTimeout, CodeRequestTimeout, "the request body did not arrive within the body timeout (docs/localapi.md, Limits)"}
		}
		return nil, badRequest(CodeInvalidJSON, "reading the request body: "+err.Error())
	}
	return body, nil
}

// MaxJSONDepth is how deep a request body may nest objects and arrays:
// the envelope ({"data": ...}) is one level, so an entity's data may
// nest 127 levels. Deeper is 400 invalid_json.
const MaxJSONDepth = jsonstrict.DefaultMaxDepth

// decodeObject parses body as exactly one JSON object whose members are
// among fields (matched exactly, unlike encoding/json's case-insensitive
// match), decoding each into its destination.
//
// First jsonstrict.Check refuses, as 400 invalid_json, what
// encoding/json would accept and rewrite: invalid UTF-8 and lone
// surrogate escapes (which it turns into U+FFFD, so two member names
// could become one), a member name given twice (it keeps the last; other
// readers keep the first), and nesting deeper than MaxJSONDepth.
func decodeObject(body []byte, fields ...*field) error {
	return decodeObjectDepth(body, MaxJSONDepth, fields...)
}

// decodeObjectDepth is decodeObject with nesting bounded by maxDepth: a
// batch's body holds its writes two levels down (the array, the write),
// so it allows MaxJSONDepth+2 and each write nests as a single write's
// body may.
func decodeObjectDepth(body []byte, maxDepth int, fields ...*field) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest(CodeInvalidJSON, "request body is empty; want a JSON object")
	}
	strict := jsonstrict.Check(body, maxDepth)
	if je := (*jsonstrict.Error)(nil); errors.As(strict, &je) && je.Kind != jsonstrict.Syntax {
		return badRequest(CodeInvalidJSON, jsonstrictProblem(je, "request body"))
	}
	if err := decodeFields(body, fields); err != nil {
		return err
	}
	if strict != nil {
		// A syntax error encoding/json did not see (the two are fuzzed
		// to agree; this is the belt to those braces).
		return badRequest(CodeInvalidJSON, "request body is not valid JSON: "+strict.Error())
	}
	return nil
}

// jsonstrictProblem is the readable reason of a jsonstrict refusal.
func jsonstrictProblem(je *jsonstrict.Error, what string) string {
	return fmt.Sprintf("%s is JSON that readers would take in different ways (%s): %s", what, je.Kind, je.Error())
}

// decodeFields decodes the JSON object body into fields.
func decodeFields(body []byte, fields []*field) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var obj map[string]json.RawMessage
	if err := d.Decode(&obj); err != nil {
		return badRequest(CodeInvalidJSON, jsonProblem(err, "request body"))
	}
	if obj == nil {
		return badRequest(CodeInvalidJSON, "request body must be a JSON object, got null")
	}
	if _, err := d.Token(); err != io.EOF {
		return badRequest(CodeInvalidJSON, "request body has data after the JSON object")
	}
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		names = append(names, f.name)
	}
	for name := range obj {
		if !slices.Contains(names, name) {
			return badRequest(CodeInvalidRequest, fmt.Sprintf("unknown field %q (allowed: %s)", name, strings.Join(names, ", ")))
		}
	}
	for _, f := range fields {
		raw, ok := obj[f.name]
		f.present = ok
		if !ok {
			if f.required {
				return badRequest(CodeInvalidRequest, fmt.Sprintf("field %q is required", f.name))
			}
			continue
		}
		if rm, isRaw := f.dst.(*json.RawMessage); isRaw {
			*rm = raw
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			return badRequest(CodeInvalidRequest, fmt.Sprintf("field %q: %s", f.name, jsonProblem(err, f.name)))
		}
	}
	return nil
}

// jsonProblem turns a decoding error into a readable reason.
func jsonProblem(err error, what string) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return what + " is not complete JSON"
	case errors.As(err, &se):
		return fmt.Sprintf("%s is not valid JSON (at byte %d: %v)", what, se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("%s must be a JSON %s, not %s", what, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return fmt.Sprintf("%s must be a JSON %s, not %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	return err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	}
	return "number"
}

// requireObject checks that an entity's data is one JSON object.
func requireObject(name string, raw json.RawMessage) error {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return badRequest(CodeInvalidRequest, fmt.Sprintf("field %q must be a JSON object", name))
	}
	return nil
}

// requireNoBody refuses a body on a request that takes none.
func requireNoBody(r *http.Request) error {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var b [1]byte
	n, err := io.ReadFull(r.Body, b[:])
	if n == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF) {
		return nil
	}
	return badRequest(CodeInvalidRequest, r.Method+" "+r.URL.Path+" takes no request body")
}

// query parses a request's query parameters, refusing names not in
// allowed (a misspelt filter would otherwise silently list everything)
// and repeated names.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest(CodeInvalidRequest, "query string: "+err.Error())
	}
	for name, vals := range q {
		if !slices.Contains(allowed, name) {
			if len(allowed) == 0 {
				return nil, badRequest(CodeInvalidRequest, fmt.Sprintf("unknown query parameter %q (this route takes none)", name))
			}
			return nil, badRequest(CodeInvalidRequest, fmt.Sprintf("unknown query parameter %q (allowed: %s)", name, strings.Join(allowed, ", ")))
		}
		if len(vals) > 1 {
			return nil, badRequest(CodeInvalidRequest, fmt.Sprintf("query parameter %q given %d times", name, len(vals)))
		}
	}
	return q, nil
}

// parseLimit parses the limit query parameter: empty means the queue's
// default page size.
func parseLimit(s string) (int, error) {
	if s == "" {
		return queue.DefaultListLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > queue.MaxListLimit {
		return 0, badRequest(CodeInvalidRequest, fmt.Sprintf("limit must be an integer from 1 to %d, got %q", queue.MaxListLimit, s))
	}
	return n, nil
}

func parseBool(name, s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badRequest(CodeInvalidRequest, fmt.Sprintf("%s must be true or false, got %q", name, s))
	}
	return b, nil
}

// idempotencyKey returns the request's Idempotency-Key, "" when absent.
func idempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values(headerIdempotencyKey)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", badRequest(CodeInvalidRequest, "Idempotency-Key header given more than once")
	}
	key := vals[0]
	if err := validID(key, queue.ValidateOperationID); err != nil {
		return "", badRequest(CodeInvalidRequest, fmt.Sprintf("Idempotency-Key header must be 1 to %d printable ASCII characters without spaces or '/', and not . or ..", queue.MaxOperationIDLen))
	}
	return key, nil
}

// Idempotency-Key fingerprints. A key names one write: the same write
// under the same key replays, another write is 422. The fingerprint
// covers the write as the queue takes it, decoded: the operation, the
// entity type, the entity id and the canonical data. So a write sent
// alone and in a batch, or with its id escaped in its path by
// url.PathEscape, encodeURIComponent or not at all, is one write.

// writeFingerprintTag starts the hashed text of a write fingerprint, so
// that it is never the text of an older request fingerprint (which
// starts with the method).
const writeFingerprintTag = "syncd write 2"

// writeFingerprint is the hex SHA-256 of w's operation, entity type,
// entity id (empty for a create that names none) and data, which
// canonicalWrite has made canonical. Types and ids are printable ASCII and
// canonical JSON holds no raw NUL, so the NUL separators are unambiguous.
func writeFingerprint(w queue.Write) string {
	h := sha256.New()
	io.WriteString(h, writeFingerprintTag)
	for _, s := range []string{string(w.Op), w.EntityType, w.EntityID} {
		h.Write([]byte{0})
		io.WriteString(h, s)
	}
	h.Write([]byte{0})
	h.Write(w.Data)
	return hex.EncodeToString(h.Sum(nil))
}

// canonicalWrite makes w's data canonical, the form the queue stores and
// sends and whose size its data limit counts (so an app's whitespace
// counts for nothing), and, with a key, sets w's operation id and
// fingerprint. A single write and a batch's write both pass here, so
// they are the same queue write.
func canonicalWrite(w *queue.Write, key string) error {
	if w.Op != queue.OpDelete {
		c, err := queue.CanonicalData(w.Data)
		if err != nil {
			return badRequest(CodeInvalidJSON, jsonProblem(err, `field "data"`))
		}
		w.Data, w.Canonical = c, true // the queue stores it as it is
	}
	if key != "" {
		w.OperationID, w.RequestFingerprint = key, writeFingerprint(*w)
	}
	return nil
}

// Fingerprints of operations stored before syncd fingerprinted decoded
// writes hashed the request instead: the method, the URL-escaped path
// (a single write's as the client escaped it, a batch's write's by
// url.PathEscape) and the canonical body. An operation keeps its
// fingerprint for as long as its key is remembered (doneRetention, or
// for good while unsent), so a retry after the upgrade of a write stored
// before it would answer 422. The queue compares one fingerprint, so when
// it refuses a key as reused, the API reads the operation under the key
// and, when its fingerprint is one this write had then, applies the write
// again with it: the queue replays. Only a refused key pays for this.

// legacyFingerprints are the fingerprints an older syncd stored for w
// (canonicalWrite done, key set), with its path escaped as url.PathEscape
// (the Go client, a batch), as encodeURIComponent (the TypeScript
// client) and as escapedPath (a single write's own, "" in a batch).
func legacyFingerprints(w queue.Write, escapedPath string) []string {
	method, body := http.MethodPatch, map[string]any{"data": json.RawMessage(w.Data)}
	switch w.Op {
	case queue.OpCreate:
		method = http.MethodPost
		if w.EntityID != "" {
			body["id"] = w.EntityID
		}
	case queue.OpDelete:
		method, body = http.MethodDelete, nil
	}
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return nil
		}
	}
	paths := []string{escapedPath}
	for _, esc := range []func(string) string{url.PathEscape, escapeComponent} {
		p := "/v1/entities/" + esc(w.EntityType)
		if w.Op != queue.OpCreate {
			p += "/" + esc(w.EntityID)
		}
		paths = append(paths, p)
	}
	var fps []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		if fp, err := legacyFingerprint(method, p, raw); err == nil && !slices.Contains(fps, fp) {
			fps = append(fps, fp)
		}
	}
	return fps
}

// legacyFingerprint is the request fingerprint of older syncd: hex
// SHA-256 over the method, the escaped path and json.Marshal of the
// decoded body.
func legacyFingerprint(method, escapedPath string, body []byte) (string, error) {
	h := sha256.New()
	io.WriteString(h, method)
	h.Write([]byte{0})
	io.WriteString(h, escapedPath)
	h.Write([]byte{0})
	if len(body) > 0 {
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return "", err
		}
		c, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		h.Write(c)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// escapeComponent escapes s as JavaScript's encodeURIComponent does.
func escapeComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// storedLegacyFingerprint returns the fingerprint of the operation under
// w's key when an older syncd stored it for this same write in account,
// "" otherwise (see legacyFingerprints).
func (s *Server) storedLegacyFingerprint(w queue.Write, account, escapedPath string) string {
	if w.OperationID == "" {
		return ""
	}
	op, err := s.store.GetOperation(w.OperationID)
	if err != nil || op.AccountID != account || op.RequestFingerprint == w.RequestFingerprint {
		return ""
	}
	if slices.Contains(legacyFingerprints(w, escapedPath), op.RequestFingerprint) {
		return op.RequestFingerprint
	}
	return ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// errDotID is why an id may not be "." or "..".
var errDotID = errors.New(`an id may not be "." or "..": a URL path segment of that name is removed by every URL cleaner, so it could never be addressed`)

// validID checks an id that appears in a URL path (entity and operation
// ids) with the queue's validate, and refuses "." and ".." besides.
func validID(s string, validate func(string) error) error {
	if s == "." || s == ".." {
		return errDotID
	}
	return validate(s)
}
