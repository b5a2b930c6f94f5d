package idempotency

import (
	"bytes"
	"net/http"
)

// recorder buffers a handler's response: nothing reaches the client
// before the transaction that stores it has committed. It keeps at most
// limit bytes of body; past that it drops the rest and sets overflow.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
	limit       int64
	overflow    bool
}

func newRecorder(limit int64) *recorder {
	return &recorder{header: make(http.Header), status: http.StatusOK, limit: limit}
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.wroteHeader || status < 200 {
		return // 1xx informational answers are not recorded
	}
	r.wroteHeader = true
	r.status = status
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	if r.overflow || int64(r.body.Len())+int64(len(p)) > r.limit {
		r.overflow = true
		return 0, errResponseTooLarge
	}
	return r.body.Write(p)
}
