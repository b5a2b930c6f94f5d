package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// isObject reports whether data is one JSON object and nothing else.
func isObject(data []byte) bool {
	d := json.NewDecoder(bytes.NewReader(data))
	var m map[string]json.RawMessage
	if err := d.Decode(&m); err != nil || m == nil {
		return false
	}
	_, err := d.Token()
	return err != nil // io.EOF: nothing after the object
}

// canonicalJSON re-encodes v with sorted object keys and no insignificant
// whitespace; numbers keep their literal text.
func canonicalJSON(data []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
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

// mergePatch applies an RFC 7396 JSON merge patch to the object target.
func mergePatch(target, patch json.RawMessage) (json.RawMessage, error) {
	var t, p map[string]json.RawMessage
	if err := json.Unmarshal(target, &t); err != nil {
		return nil, fmt.Errorf("entity data: %w", err)
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	if t == nil {
		t = map[string]json.RawMessage{}
	}
	for k, v := range p {
		switch {
		case bytes.Equal(bytes.TrimSpace(v), []byte("null")):
			delete(t, k)
		case isObject(v):
			// RFC 7396: an object patches the member as an object, which
			// a missing or non-object member starts as {} (so its nulls
			// delete rather than being stored).
			base := t[k]
			if !isObject(base) {
				base = json.RawMessage("{}")
			}
			merged, err := mergePatch(base, v)
			if err != nil {
				return nil, err
			}
			t[k] = merged
		default:
			c, err := canonicalJSON(v)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
	}
	return marshal(t)
}

// payloadFingerprint is the SHA-256 (hex) of the canonical JSON of an
// operation's business fields: what it does, to what, with which data.
func payloadFingerprint(op *Operation) string {
	data := json.RawMessage("null")
	if len(op.Payload) > 0 {
		if c, err := canonicalJSON(op.Payload); err == nil {
			data = c
		}
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
