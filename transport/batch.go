package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The batch route: POST {BaseURL}/v1/batch {"operations":[{idempotencyKey,
// method, path, body}, ...]} → {"results":[{status, body, replayed,
// retryAfter?}, ...]}, each operation through the server's idempotency
// gate on its own (DESIGN.md Part 2, "Batches").

// BatchPath is the batch route, relative to Config.BaseURL.
const BatchPath = "/v1/batch"

// ErrNoBatch: the remote answered the batch route 404 or 405: it has
// none. Nothing was applied; send the operations one by one.
var ErrNoBatch = errors.New("transport: the remote has no batch route")

// BatchTooLargeError: the remote answered a batch of two or more
// operations 413 Content Too Large (a proxy in front of it, or a limit
// lower than the one it advertises). Nothing was applied; the same
// operations in smaller batches, or alone, may pass. Bytes is the
// refused request body's size.
type BatchTooLargeError struct {
	Bytes      int
	Operations int
}

func (e *BatchTooLargeError) Error() string {
	return fmt.Sprintf("transport: the remote refused a batch of %d operations, %d bytes, as too large (413)", e.Operations, e.Bytes)
}

type batchOp struct {
	IdempotencyKey string          `json:"idempotencyKey"`
	Method         string          `json:"method"`
	Path           string          `json:"path"`
	Body           json.RawMessage `json:"body,omitempty"`
	After          *int            `json:"after,omitempty"` // Request.Chained: the index of the op before it
}

type batchResult struct {
	Status     int             `json:"status"`
	Body       json.RawMessage `json:"body"`
	Replayed   bool            `json:"replayed"`
	RetryAfter int             `json:"retryAfter"`
}

// SendBatch sends rs as one batch request and returns each one's
// Outcome, classified as the same request's answer would be alone (the
// decision table holds per item). A request that cannot be built gets
// its own outcome and is left out of the batch. When the batch request
// fails as a whole (no answer, a 5xx, a 401), every item gets that
// outcome, maybe applied as a lost single answer would be. It returns
// ErrNoBatch, with no outcomes, when the remote has no batch route, and
// a *BatchTooLargeError when it refused a batch of several operations
// with 413: a limit on the whole request says nothing of each item, so
// the items are not failed with it.
func (c *Client) SendBatch(ctx context.Context, rs []Request) ([]Outcome, error) {
	outs := make([]Outcome, len(rs))
	var (
		ops   []batchOp
		idx   []int // ops[i] is rs[idx[i]]
		trs   []typeRoutes
		token string
	)
	sentPrev := false // the request before this one is in the batch
	for i, r := range rs {
		if r.Chained && (!sentPrev || r.Op != OpUpdate) {
			// What it follows is not sent: neither is it.
			outs[i] = Outcome{Decision: Retry, Code: CodeDependencyFailed,
				Message: "not sent: the request it follows is not in the batch"}
			sentPrev = false
			continue
		}
		hr, tr, stop := c.build(r)
		if stop != nil {
			outs[i] = *stop
			sentPrev = false
			continue
		}
		sentPrev = true
		if token == "" {
			token = r.Token
		} else if r.Token != token {
			return nil, fmt.Errorf("transport: a batch carries one account's token")
		}
		var body json.RawMessage
		if hr.GetBody != nil {
			rc, _ := hr.GetBody()
			body, _ = io.ReadAll(rc)
		}
		path := strings.TrimPrefix(hr.URL.String(), c.baseURL)
		op := batchOp{IdempotencyKey: r.OperationID, Method: hr.Method, Path: c.basePath() + path, Body: body}
		if r.Chained {
			after := len(ops) - 1
			op.After = &after
		}
		ops = append(ops, op)
		idx = append(idx, i)
		trs = append(trs, tr)
	}
	if len(ops) == 0 {
		return outs, nil
	}
	// Not json.Marshal: it would write '<', '>' and '&' six bytes each.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"operations": ops}); err != nil {
		return nil, fmt.Errorf("transport: batch: %w", err)
	}
	payload := buf.Bytes()
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, ErrTimeout)
	defer cancel()
	ctx, sends := countSends(ctx)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+BatchPath, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("transport: batch: %w", err)
	}
	hr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(payload)), nil }
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", c.userAgent)
	hr.Header.Set("Authorization", "Bearer "+token)
	// No Idempotency-Key of its own: each operation carries its key, and
	// net/http resends a request without one only when it is safe.
	resp, err := c.hc.Do(hr)
	each := func(fn func(j int, r Request, tr typeRoutes) Outcome) []Outcome {
		for j, i := range idx {
			o := fn(j, rs[i], trs[j])
			o.Sends = int(sends.Load())
			o.Method, o.URL = ops[j].Method, c.baseURL+strings.TrimPrefix(ops[j].Path, c.basePath())
			outs[i] = o
		}
		return outs
	}
	if err != nil {
		return each(func(_ int, r Request, _ typeRoutes) Outcome { return c.failed(ctx, r, err) }), nil
	}
	body, truncated, err := readBody(resp.Body, c.maxBody*int64(max(len(ops), 1)))
	resp.Body.Close()
	readAt := c.now()
	if err != nil {
		return each(func(_ int, r Request, _ typeRoutes) Outcome {
			o := c.failed(ctx, r, err)
			o.Status = resp.StatusCode
			return o
		}), nil
	}
	var ans struct {
		Results []batchResult `json:"results"`
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, ErrNoBatch
	case resp.StatusCode == http.StatusRequestEntityTooLarge && len(ops) > 1:
		return nil, &BatchTooLargeError{Bytes: len(payload), Operations: len(ops)}
	case resp.StatusCode != http.StatusOK:
		// The batch as a whole was answered (a 401, a 503, a 413): each
		// item as if it had been answered so.
		return each(func(_ int, r Request, tr typeRoutes) Outcome {
			return c.classify(r, tr, resp, body, truncated, readAt)
		}), nil
	case truncated || json.Unmarshal(body, &ans) != nil || len(ans.Results) != len(ops):
		// A 200 that does not say what became of each item: each may
		// have been applied, and a resend replays.
		bad := fmt.Errorf("the batch answer is not one result per operation: %w", ErrInvalidResponse)
		return each(func(_ int, r Request, _ typeRoutes) Outcome {
			o := Outcome{Decision: Retry, Code: CodeServerError, Status: resp.StatusCode, Message: bad.Error(), Err: bad}
			return o
		}), nil
	}
	return each(func(j int, r Request, tr typeRoutes) Outcome {
		res := ans.Results[j]
		h := http.Header{}
		if res.Replayed {
			h.Set("Idempotent-Replayed", "true")
		}
		if res.RetryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(res.RetryAfter))
		}
		item := &http.Response{StatusCode: res.Status, Header: h}
		return c.classify(r, tr, item, res.Body, false, readAt)
	}), nil
}

// basePath is the path part of BaseURL ("" or "/app").
func (c *Client) basePath() string {
	if i := strings.Index(c.baseURL, "://"); i >= 0 {
		if j := strings.IndexByte(c.baseURL[i+3:], '/'); j >= 0 {
			return c.baseURL[i+3+j:]
		}
	}
	return ""
}
