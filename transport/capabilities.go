package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/syncd/syncd/idempotency/jsonstrict"
)

// The capabilities route: GET {BaseURL}/v1/capabilities →
// {"batch": {"maxOperations": N, "maxBytes": M}, "changes": true}, what
// the remote serves besides the single write routes (DESIGN.md Part 2,
// "Batches", and Part 3, "The remote's capabilities decide"). The daemon
// POSTs to /v1/batch only where this advertises it.

// CapabilitiesPath is the capabilities route, relative to Config.BaseURL.
const CapabilitiesPath = "/v1/capabilities"

// maxCapabilitiesBody bounds the answer read: a capabilities object is a
// few dozen bytes, and anything long is something else (a list of
// records of a type named "capabilities").
const maxCapabilitiesBody = 64 << 10

// ErrNoCapabilities: the remote advertises nothing. It answered
// GET /v1/capabilities with a status that says the route is not there
// (404, 405, 410, 501, another 4xx but 401, 408 and 429, a 3xx), or with
// a body that is not a capabilities object. The daemon then sends single
// requests only.
var ErrNoCapabilities = errors.New("transport: the remote advertises no capabilities")

// Capabilities is what a remote advertises.
type Capabilities struct {
	// Batch is the remote's batch route and its limits; nil: it has none.
	Batch *BatchCapability
	// Changes says the remote serves the changes feed (GET /v1/changes).
	Changes bool
}

// BatchCapability is the batch route's limits as the remote states
// them: at most MaxOperations operations and MaxBytes bytes of request
// body per batch.
type BatchCapability struct {
	MaxOperations int
	MaxBytes      int64
	// Chains says the remote runs a batch's chained updates
	// (Request.Chained) in order, each made on the version the one
	// before it produced.
	Chains bool
}

// Capabilities reads GET {BaseURL}/v1/capabilities with the account's
// token. A status or body that says the remote has no such route is
// ErrNoCapabilities; a 401 is ErrUnauthorized; no answer, a timeout, a
// 408, 429 or 5xx (but 501) is an error worth retrying later, wrapping
// ErrTimeout or ErrStatus where they apply.
//
// A capabilities object is a JSON object (strict: no duplicated member,
// valid UTF-8) holding "batch", "changes" or both. "changes" is true or
// false (null: false). "batch" is null, false, or an object whose
// "maxOperations" and "maxBytes" are positive whole numbers. Other
// members are ignored (later capabilities). Any other body, a list of
// records of a type named "capabilities" say, is ErrNoCapabilities.
func (c *Client) Capabilities(ctx context.Context, token string) (Capabilities, error) {
	var caps Capabilities
	status, body, truncated, err := c.getJSON(ctx, "capabilities", token, c.baseURL+CapabilitiesPath, c.timeout, maxCapabilitiesBody)
	if err != nil {
		return caps, err
	}
	switch s := status; {
	case s >= 200 && s < 300:
	case s == http.StatusUnauthorized:
		return caps, fmt.Errorf("transport: capabilities: %w", ErrUnauthorized)
	case s == http.StatusRequestTimeout, s == http.StatusTooManyRequests, s >= 500 && s != http.StatusNotImplemented:
		code, msg := errorBody(body)
		return caps, fmt.Errorf("transport: capabilities: %d %s %s: %w", s, code, msg, ErrStatus)
	default:
		return caps, fmt.Errorf("%w: GET %s answered %d", ErrNoCapabilities, CapabilitiesPath, s)
	}
	if truncated {
		return caps, fmt.Errorf("%w: GET %s answered more than %d bytes", ErrNoCapabilities, CapabilitiesPath, maxCapabilitiesBody)
	}
	caps, err = ParseCapabilities(body)
	if err != nil {
		return Capabilities{}, fmt.Errorf("%w: GET %s: %v", ErrNoCapabilities, CapabilitiesPath, err)
	}
	return caps, nil
}

// ParseCapabilities reads a capabilities object (see Client.Capabilities);
// the error says why body is not one.
func ParseCapabilities(body []byte) (Capabilities, error) {
	var caps Capabilities
	if err := jsonstrict.Check(body, 0); err != nil {
		return caps, fmt.Errorf("not JSON: %v", err)
	}
	var obj map[string]json.RawMessage
	if !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) || json.Unmarshal(body, &obj) != nil {
		return caps, errors.New("not a JSON object")
	}
	rawBatch, hasBatch := obj["batch"]
	rawChanges, hasChanges := obj["changes"]
	if !hasBatch && !hasChanges {
		return caps, errors.New(`an object without "batch" or "changes"`)
	}
	if hasChanges {
		switch string(bytes.TrimSpace(rawChanges)) {
		case "true":
			caps.Changes = true
		case "false", "null":
		default:
			return caps, fmt.Errorf(`"changes" is %.40s, not true or false`, rawChanges)
		}
	}
	if hasBatch {
		switch string(bytes.TrimSpace(rawBatch)) {
		case "false", "null":
		default:
			var b struct {
				MaxOperations json.RawMessage `json:"maxOperations"`
				MaxBytes      json.RawMessage `json:"maxBytes"`
				Chains        json.RawMessage `json:"chains"`
			}
			if !bytes.HasPrefix(bytes.TrimSpace(rawBatch), []byte("{")) || json.Unmarshal(rawBatch, &b) != nil {
				return caps, fmt.Errorf(`"batch" is %.40s, not an object`, rawBatch)
			}
			ops, err := positive(b.MaxOperations)
			if err != nil {
				return caps, fmt.Errorf(`"batch.maxOperations": %v`, err)
			}
			size, err := positive(b.MaxBytes)
			if err != nil {
				return caps, fmt.Errorf(`"batch.maxBytes": %v`, err)
			}
			caps.Batch = &BatchCapability{MaxOperations: int(min(ops, math.MaxInt32)), MaxBytes: size,
				// Anything but true (absent, false, a string) is no chains.
				Chains: string(bytes.TrimSpace(b.Chains)) == "true"}
		}
	}
	return caps, nil
}

// positive reads a JSON number that is a positive whole number.
func positive(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 {
		return 0, errors.New("missing")
	}
	var n json.Number
	if raw[0] == '"' || json.Unmarshal(raw, &n) != nil || n == "" {
		return 0, fmt.Errorf("%.40s is not a number", raw)
	}
	v, err := n.Int64()
	if err != nil {
		// 1e6 and 1.0 are whole numbers too; 1.5 and 1e30 are not
		// limits a batch can be sized by.
		f, ferr := n.Float64()
		if ferr != nil || f != math.Trunc(f) || f > math.MaxInt64 {
			return 0, fmt.Errorf("%s is not a whole number", n)
		}
		v = int64(f)
	}
	if v <= 0 {
		return 0, fmt.Errorf("%s is not positive", n)
	}
	return v, nil
}

// BatchEnvelopeBytes is the part of a batch request's body that is not
// an operation: SendBatch sends BatchEnvelopeBytes, plus BatchItemBytes
// of each operation, plus a comma between two operations
// (`{"operations":[` item `,` item `]}` and a newline).
const BatchEnvelopeBytes = len(`{"operations":[]}` + "\n")

// BatchItemBytes is the size of r's operation in the body SendBatch
// would send for it, without the comma that separates it from the
// previous one; 0 for a request that cannot be built (SendBatch answers
// it without sending it). The daemon sizes its batches by it to keep
// them under the remote's advertised maxBytes.
func (c *Client) BatchItemBytes(r Request) int {
	hr, _, stop := c.build(r)
	if stop != nil {
		return 0
	}
	var body json.RawMessage
	if hr.GetBody != nil {
		if rc, err := hr.GetBody(); err == nil {
			var buf bytes.Buffer
			buf.ReadFrom(rc)
			body = buf.Bytes()
		}
	}
	path := strings.TrimPrefix(hr.URL.String(), c.baseURL)
	// Encoded as SendBatch encodes it (no HTML escaping); its newline is
	// the envelope's.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	op := batchOp{IdempotencyKey: r.OperationID, Method: hr.Method, Path: c.basePath() + path, Body: body}
	if r.Chained {
		// Its "after" is the index of the item before it, which the
		// size cannot know: counted at its longest (a batch holds far
		// fewer than 10^9 items).
		most := 999_999_999
		op.After = &most
	}
	if err := enc.Encode(op); err != nil {
		return 0
	}
	return buf.Len() - 1
}
