package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/syncd/syncd/idempotency/jsonstrict"
)

// checkedObject reports whether data, one JSON value by jsonstrict.Check,
// is an object: whether it opens with '{'. It tells what isObject does
// without decoding the value (FuzzCheckedObject).
func checkedObject(data []byte) bool {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

// CanonicalData is data as the store keeps it: object members sorted, no
// insignificant whitespace, numbers as written, no HTML escaping. Its
// output is its own fixed point; a Write whose Data it made may say so
// (Write.Canonical).
func CanonicalData(data []byte) ([]byte, error) { return canonicalJSON(data) }

// canonicalJSON re-encodes v with sorted object keys and no insignificant
// whitespace; numbers keep their literal text.
func canonicalJSON(data []byte) ([]byte, error) {
	v, err := decodeNumbers(data)
	if err != nil {
		return nil, err
	}
	return marshal(v) // maps marshal with sorted keys
}

// marshal is json.Marshal without HTML escaping: '<', '>' and '&' stay
// one byte each, so canonical data is no bigger than the app's (which
// the size limit counts) but for the rare \u2028, \u2029 and invalid
// UTF-8.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// MaxDataDepth bounds how deep objects and arrays nest in entity data and
// in a patch. Deeper input is refused (ErrInvalidWrite wrapping a
// *jsonstrict.Error of kind TooDeep) before anything is decoded.
const MaxDataDepth = jsonstrict.DefaultMaxDepth

// mergePatch applies an RFC 7396 JSON merge patch to the object target.
// Each document is decoded once and the result encoded once, so the work
// follows the size of the input, whatever its depth.
func mergePatch(target, patch json.RawMessage) (json.RawMessage, error) {
	t, err := decodeNumbers(target)
	if err != nil {
		return nil, fmt.Errorf("entity data: %w", err)
	}
	p, err := decodeNumbers(patch)
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	if _, ok := p.(map[string]any); !ok {
		return nil, fmt.Errorf("patch: not a JSON object")
	}
	return marshal(mergeValue(t, p))
}

// mergeValue is RFC 7396's MergePatch on decoded values: an object patch
// patches the target as an object, which a missing or non-object target
// starts as {} (so the patch's nulls delete rather than being stored);
// anything else replaces the target.
func mergeValue(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = make(map[string]any, len(p))
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergeValue(t[k], v)
	}
	return t
}

// decodeNumbers decodes one JSON value, numbers kept as their text.
func decodeNumbers(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// payloadFingerprint is the SHA-256 (hex) of the canonical JSON of an
// operation's business fields: what it does, to what, with which data.
func payloadFingerprint(op *Operation) string {
	// Payloads are canonical JSON already: every entity's data is made
	// canonical where it enters the store (an app's write, a merge
	// patch's result, a pulled change), and a payload is that data.
	data := json.RawMessage("null")
	if len(op.Payload) > 0 {
		data = op.Payload
	}
	b, _ := json.Marshal(struct {
		Type           OpType          `json:"operationType"`
		EntityType     string          `json:"entityType"`
		EntityID       string          `json:"entityId"`
		PayloadVersion int64           `json:"payloadVersion"`
		Data           json.RawMessage `json:"data"`
	}{op.Type, op.EntityType, op.EntityID, op.PayloadVersion, data})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
