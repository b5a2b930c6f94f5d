package localapi

import (
	"net/http"
	"time"

	"github.com/syncd/syncd/daemon"
)

// History is what GET /v1/status/history needs. *daemon.History
// satisfies it.
type History interface {
	Samples() []daemon.Sample
	Interval() time.Duration
}

// historyAnswer is the answer to GET /v1/status/history.
type historyAnswer struct {
	IntervalSeconds int             `json:"interval_seconds"`
	Samples         []daemon.Sample `json:"samples"`
}

// GET /v1/status/history → 200 {interval_seconds, samples: [{at, queued,
// pending, failed, sent}]}, oldest first: what the daemon sampled in
// memory over the last hour.
func (s *Server) statusHistory(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if s.history == nil {
		s.fail(w, r, &apiError{http.StatusNotFound, CodeNotFound, "this daemon keeps no status history"})
		return
	}
	samples := s.history.Samples()
	if samples == nil {
		samples = []daemon.Sample{}
	}
	writeJSON(w, http.StatusOK, historyAnswer{IntervalSeconds: int(s.history.Interval() / time.Second), Samples: samples})
}
