package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClassifyStatus drives every status row of DESIGN.md's outcome table
// (and the rows this package adds) through a real server on loopback.
func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	errBody := func(code string) string {
		return `{"error":{"code":"` + code + `","message":"the server says ` + code + `"}}`
	}
	tests := []struct {
		name    string
		req     Request
		handler http.HandlerFunc

		decision   Decision
		code       string
		serverID   string
		replayed   bool
		retryAfter time.Duration
		serverCode string
		wantErr    error
		otherData  bool
		serverVer  int64
	}{
		{
			// A merging server laid the create over another device's
			// record, or a discarded create left more: the record holds
			// the data sent, and the daemon takes the rest from the
			// answer's data (Outcome.Data).
			name:     "200 create holding the data sent, and more",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","data":{"title":"hi","addedByServer":true},"payloadVersion":3}`),
			decision: Done, serverID: "srv-9",
		},
		{
			name:     "200 create holding the data sent, written otherwise",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","data":{ "title" : "hi" },"payloadVersion":3}`),
			decision: Done, serverID: "srv-9",
		},
		{
			name:     "200 create holding other data, a version written 7.0",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","data":{"title":"old"},"payloadVersion":7.0}`),
			decision: Done, serverID: "srv-9", otherData: true, serverVer: 7,
		},
		{
			name:     "200 create holding other data, a version that is no whole number",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","data":{"title":"old"},"payloadVersion":7.5}`),
			decision: Done, serverID: "srv-9", otherData: true,
		},
		{
			name:     "200 create holding other data",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","data":{"title":"old"},"payloadVersion":5}`),
			decision: Done, serverID: "srv-9", otherData: true, serverVer: 5,
		},
		{
			name:     "200 create lacking a member sent, replayed, the version a string",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","data":{},"payloadVersion":"5"}`, "Idempotent-Replayed", "true"),
			decision: Done, serverID: "srv-9", otherData: true, serverVer: 5, replayed: true,
		},
		{
			name:     "200 create without data",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","data":"opaque"}`),
			decision: Done, serverID: "srv-9",
		},
		{
			name:     "201 create with other data: a new record, as the server made it",
			req:      createReq(),
			handler:  reply(201, `{"id":"srv-9","data":{"title":"HI"}}`),
			decision: Done, serverID: "srv-9",
		},
		{
			name:     "201 create",
			req:      createReq(),
			handler:  reply(201, `{"id":"srv-9","clientId":"local-1"}`),
			decision: Done, serverID: "srv-9",
		},
		{
			name:     "200 create replayed",
			req:      createReq(),
			handler:  reply(200, `{"id":"srv-9","clientId":"local-1"}`, "Idempotent-Replayed", "true"),
			decision: Done, serverID: "srv-9", replayed: true,
		},
		{
			name:     "201 create numeric id",
			req:      createReq(),
			handler:  reply(201, `{"id":12345678901234567890}`),
			decision: Done, serverID: "12345678901234567890",
		},
		{
			name:     "201 create without id",
			req:      createReq(),
			handler:  reply(201, `{"clientId":"local-1"}`),
			decision: Permanent, code: CodeInvalidResponse, wantErr: ErrInvalidResponse,
		},
		{
			name:     "201 create not json",
			req:      createReq(),
			handler:  reply(201, `ok`),
			decision: Permanent, code: CodeInvalidResponse, wantErr: ErrInvalidResponse,
		},
		{
			name:     "200 update",
			req:      updateReq(),
			handler:  reply(200, `{"id":"srv-1"}`),
			decision: Done, serverID: "srv-1",
		},
		{
			name:     "204 delete",
			req:      deleteReq(),
			handler:  reply(204, ``),
			decision: Done, serverID: "srv-1",
		},
		{
			name:     "204 delete replayed",
			req:      deleteReq(),
			handler:  reply(204, ``, "Idempotent-Replayed", "TRUE"),
			decision: Done, serverID: "srv-1", replayed: true,
		},
		{
			name:     "404 delete is done",
			req:      deleteReq(),
			handler:  reply(404, errBody("not_found")),
			decision: Done, code: CodeNotFound, serverID: "srv-1", serverCode: "not_found",
		},
		{
			// The record the update was made on is gone (deleted and
			// swept): a conflict, as a 410 is.
			name:     "404 update",
			req:      updateReq(),
			handler:  reply(404, errBody("not_found")),
			decision: Conflict, code: CodeDeletedOnServer, serverCode: "not_found", wantErr: ErrStatus,
		},
		{
			name:     "404 create",
			req:      createReq(),
			handler:  reply(404, `404 page not found`),
			decision: Permanent, code: CodeNotFound, wantErr: ErrStatus,
		},
		{
			name:     "410 update of a deleted entity",
			req:      updateReq(),
			handler:  reply(410, errBody("gone")),
			decision: Conflict, code: CodeDeletedOnServer, serverCode: "gone", wantErr: ErrStatus,
		},
		{
			name:     "410 delete is done",
			req:      deleteReq(),
			handler:  reply(410, errBody("gone")),
			decision: Done, code: CodeGone, serverID: "srv-1", serverCode: "gone",
		},
		{
			name:     "409 reference server in flight",
			req:      updateReq(),
			handler:  reply(409, errBody("idempotency_in_flight"), "Retry-After", "3"),
			decision: Retry, code: CodeInFlight, retryAfter: 3 * time.Second, serverCode: "idempotency_in_flight", wantErr: ErrStatus,
		},
		{
			name:     "409 in-flight code without Retry-After",
			req:      updateReq(),
			handler:  reply(409, errBody("idempotency_in_flight")),
			decision: Retry, code: CodeInFlight, serverCode: "idempotency_in_flight", wantErr: ErrStatus,
		},
		{
			name:     "408 with Retry-After",
			req:      createReq(),
			handler:  reply(408, ``, "Retry-After", "7"),
			decision: Retry, code: CodeRequestTimeout, retryAfter: 7 * time.Second, wantErr: ErrStatus,
		},
		{
			name:     "429 with Retry-After seconds",
			req:      createReq(),
			handler:  reply(429, errBody("rate_limited"), "Retry-After", "30"),
			decision: Retry, code: CodeRateLimited, retryAfter: 30 * time.Second, serverCode: "rate_limited", wantErr: ErrStatus,
		},
		{
			name:     "429 with Retry-After date",
			req:      createReq(),
			handler:  reply(429, ``, "Retry-After", clock.Add(2*time.Minute).Format(http.TimeFormat)),
			decision: Retry, code: CodeRateLimited, retryAfter: 2 * time.Minute, wantErr: ErrStatus,
		},
		{
			name:     "429 without Retry-After",
			req:      createReq(),
			handler:  reply(429, ``),
			decision: Retry, code: CodeRateLimited, wantErr: ErrStatus,
		},
		{
			name:     "503 with Retry-After",
			req:      updateReq(),
			handler:  reply(503, ``, "Retry-After", "120"),
			decision: Retry, code: CodeUnavailable, retryAfter: 2 * time.Minute, wantErr: ErrStatus,
		},
		{
			name:     "500",
			req:      createReq(),
			handler:  reply(500, errBody("internal")),
			decision: Retry, code: CodeServerError, serverCode: "internal", wantErr: ErrStatus,
		},
		{
			name:     "502",
			req:      deleteReq(),
			handler:  reply(502, `<html>bad gateway</html>`),
			decision: Retry, code: CodeServerError, wantErr: ErrStatus,
		},
		{
			name:     "409 in flight with Retry-After",
			req:      createReq(),
			handler:  reply(409, errBody("idempotency_key_in_flight"), "Retry-After", "1"),
			decision: Retry, code: CodeInFlight, retryAfter: time.Second, serverCode: "idempotency_key_in_flight", wantErr: ErrStatus,
		},
		{
			name:     "409 without body",
			req:      createReq(),
			handler:  reply(409, ``),
			decision: Retry, code: CodeInFlight, wantErr: ErrStatus,
		},
		{
			name:     "409 version conflict",
			req:      updateReq(),
			handler:  reply(409, errBody("version_conflict")),
			decision: Conflict, code: CodeVersionConflict, serverCode: "version_conflict", wantErr: ErrStatus,
		},
		{
			name:     "409 domain conflict",
			req:      updateReq(),
			handler:  reply(409, errBody("username_taken")),
			decision: NeedsUserAction, code: CodeRejected, serverCode: "username_taken", wantErr: ErrStatus,
		},
		{
			name:     "401",
			req:      createReq(),
			handler:  reply(401, errBody("unauthorized")),
			decision: RefreshSession, code: CodeUnauthorized, serverCode: "unauthorized", wantErr: ErrStatus,
		},
		{
			name:     "403",
			req:      createReq(),
			handler:  reply(403, errBody("forbidden")),
			decision: Permanent, code: CodeForbidden, serverCode: "forbidden", wantErr: ErrStatus,
		},
		{
			name:     "400",
			req:      createReq(),
			handler:  reply(400, errBody("bad_json")),
			decision: NeedsUserAction, code: CodeValidation, serverCode: "bad_json", wantErr: ErrStatus,
		},
		{
			name:     "422 validation",
			req:      updateReq(),
			handler:  reply(422, errBody("title_required")),
			decision: NeedsUserAction, code: CodeValidation, serverCode: "title_required", wantErr: ErrStatus,
		},
		{
			name:     "422 idempotency_key_reused",
			req:      createReq(),
			handler:  reply(422, errBody("idempotency_key_reused")),
			decision: Permanent, code: CodePayloadConflict, serverCode: "idempotency_key_reused", wantErr: ErrStatus,
		},
		{
			name:     "413 other 4xx",
			req:      createReq(),
			handler:  reply(413, errBody("too_large")),
			decision: NeedsUserAction, code: CodeRejected, serverCode: "too_large", wantErr: ErrStatus,
		},
		{
			name:     "302 not followed",
			req:      createReq(),
			handler:  reply(302, ``, "Location", "/elsewhere"),
			decision: Permanent, code: CodeUnexpectedStatus, wantErr: ErrStatus,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rm := newRemote(t, tt.handler)
			c := newClient(t, rm, Config{})
			o := c.Send(t.Context(), tt.req)
			if o.Decision != tt.decision || o.Code != tt.code {
				t.Fatalf("got %v/%q, want %v/%q (status %d, err %v)", o.Decision, o.Code, tt.decision, tt.code, o.Status, o.Err)
			}
			if o.ServerID != tt.serverID {
				t.Errorf("ServerID = %q, want %q", o.ServerID, tt.serverID)
			}
			if o.OtherData != tt.otherData || o.ServerPayloadVersion != tt.serverVer {
				t.Errorf("OtherData = %v, ServerPayloadVersion = %d; want %v, %d", o.OtherData, o.ServerPayloadVersion, tt.otherData, tt.serverVer)
			}
			if o.Replayed != tt.replayed {
				t.Errorf("Replayed = %v, want %v", o.Replayed, tt.replayed)
			}
			if o.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", o.RetryAfter, tt.retryAfter)
			}
			if o.ServerCode != tt.serverCode {
				t.Errorf("ServerCode = %q, want %q", o.ServerCode, tt.serverCode)
			}
			if tt.serverCode != "" && o.Message != "the server says "+tt.serverCode {
				t.Errorf("Message = %q", o.Message)
			}
			if !errors.Is(o.Err, tt.wantErr) || (tt.wantErr == nil) != (o.Err == nil) {
				t.Errorf("Err = %v, want %v", o.Err, tt.wantErr)
			}
			if o.Status == 0 || o.Sends != 1 {
				t.Errorf("Status = %d, Sends = %d; want a status and 1 send", o.Status, o.Sends)
			}
			if n := len(rm.requests()); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

// TestClassifyNetwork covers the rows without a complete response:
// refused connection, reset, timeout, cancellation, a body cut short.
func TestClassifyNetwork(t *testing.T) {
	t.Parallel()

	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		rm := newRemote(t, reply(201, `{"id":"x"}`))
		c := newClient(t, rm, Config{})
		rm.Close() // the listener is gone: dial fails
		o := c.Send(t.Context(), createReq())
		checkRetry(t, o, CodeNetwork, 0, 0)
	})

	t.Run("connection reset", func(t *testing.T) {
		t.Parallel()
		rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.(*net.TCPConn).SetLinger(0) // close sends RST
			conn.Close()
		})
		c := newClient(t, rm, Config{})
		o := c.Send(t.Context(), createReq())
		// A fresh connection is never resent by net/http.
		checkRetry(t, o, CodeNetwork, 0, 1)
	})

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done(): // the client gave up and closed
			case <-release:
			}
		})
		defer close(release) // before rm.Close, which waits for handlers
		c := newClient(t, rm, Config{Timeout: 50 * time.Millisecond})
		o := c.Send(t.Context(), createReq())
		checkRetry(t, o, CodeTimeout, 0, 1)
		if !errors.Is(o.Err, ErrTimeout) {
			t.Errorf("Err = %v, want ErrTimeout", o.Err)
		}
	})

	t.Run("caller canceled", func(t *testing.T) {
		t.Parallel()
		entered, release := make(chan struct{}), make(chan struct{})
		rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		defer close(release)
		c := newClient(t, rm, Config{})
		ctx, cancel := context.WithCancel(t.Context())
		go func() { <-entered; cancel() }()
		o := c.Send(ctx, createReq())
		checkRetry(t, o, CodeCanceled, 0, 1)
		if !errors.Is(o.Err, context.Canceled) {
			t.Errorf("Err = %v, want context.Canceled", o.Err)
		}
	})

	t.Run("body cut short", func(t *testing.T) {
		t.Parallel()
		rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(201)
			io.WriteString(w, `{"id":"srv`)
			w.(http.Flusher).Flush()
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		})
		c := newClient(t, rm, Config{})
		o := c.Send(t.Context(), createReq())
		// The create may have committed; the resend will replay it.
		checkRetry(t, o, CodeNetwork, 201, 1)
	})
}

func checkRetry(t *testing.T, o Outcome, code string, status, sends int) {
	t.Helper()
	if o.Decision != Retry || o.Code != code {
		t.Fatalf("got %v/%q, want retry/%q (err %v)", o.Decision, o.Code, code, o.Err)
	}
	if o.Status != status || o.Sends != sends {
		t.Errorf("Status = %d, Sends = %d; want %d, %d", o.Status, o.Sends, status, sends)
	}
	if o.Err == nil || o.Message == "" {
		t.Errorf("Err = %v, Message = %q; want both", o.Err, o.Message)
	}
	if !strings.Contains(o.Err.Error(), "op-1") {
		t.Errorf("Err %q does not name the operation", o.Err)
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[Decision]string{
		Done: "done", Retry: "retry", RefreshSession: "refresh_session",
		Permanent: "permanent", NeedsUserAction: "needs_user_action",
		0: "Decision(0)", 99: "Decision(99)",
	} {
		if got := d.String(); got != want {
			t.Errorf("Decision(%d).String() = %q, want %q", int(d), got, want)
		}
	}
}

// TestResponseTooLarge: a body longer than MaxResponseBytes is cut and
// marked Truncated; a 2xx create then fails as response_too_large (the
// server id was not read), not as invalid JSON; other outcomes keep the
// status's decision.
func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	const max = 64
	pad := func(body string, n int) string { // body padded with spaces to n bytes
		return body + strings.Repeat(" ", n-len(body))
	}
	created := `{"id":"srv-9","clientId":"local-1"}`
	tests := []struct {
		name      string
		req       Request
		handler   http.HandlerFunc
		decision  Decision
		code      string
		truncated bool
		wantErr   error
	}{
		{"create, body of exactly the cap", createReq(), reply(201, pad(created, max)), Done, "", false, nil},
		{"create, body one byte over", createReq(), reply(201, pad(created, max+1)), Permanent, CodeResponseTooLarge, true, ErrResponseTooLarge},
		{"create replayed, body far over", createReq(), reply(200, pad(created, 10*max), "Idempotent-Replayed", "true"), Permanent, CodeResponseTooLarge, true, ErrResponseTooLarge},
		{"update, body over", updateReq(), reply(200, pad(`{}`, max+1)), Done, "", true, nil},
		{"503, body over", createReq(), reply(503, pad(`{}`, max+1)), Retry, CodeUnavailable, true, ErrStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, newRemote(t, tt.handler), Config{MaxResponseBytes: max})
			o := c.Send(t.Context(), tt.req)
			if o.Decision != tt.decision || o.Code != tt.code || o.Truncated != tt.truncated {
				t.Fatalf("got %v/%q truncated=%v (%v), want %v/%q truncated=%v", o.Decision, o.Code, o.Truncated, o.Err, tt.decision, tt.code, tt.truncated)
			}
			if len(o.Body) > max {
				t.Errorf("Body is %d bytes, more than the cap %d", len(o.Body), max)
			}
			if tt.wantErr != nil && !errors.Is(o.Err, tt.wantErr) {
				t.Errorf("Err = %v, want %v", o.Err, tt.wantErr)
			}
			if tt.wantErr == nil && o.Err != nil {
				t.Errorf("Err = %v, want nil", o.Err)
			}
		})
	}
}
