package daemon

import (
	"testing"

	"github.com/syncd/syncd/transport"
)

// A page's progress is kept for its account only when it makes sense: a
// server's nonsense (negative, past the head, no head) clears it rather
// than showing a bar past its end.
func TestPullProgressKeepsOnlySense(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   *transport.Progress
		want pullProgress
	}{
		{&transport.Progress{At: 500, Of: 1500}, pullProgress{"alice", 500, 1500}},
		{&transport.Progress{At: 1500, Of: 1500}, pullProgress{"alice", 1500, 1500}},
		{nil, pullProgress{}},
		{&transport.Progress{At: 0, Of: 0}, pullProgress{}},
		{&transport.Progress{At: 1501, Of: 1500}, pullProgress{}},
		{&transport.Progress{At: -1, Of: 1500}, pullProgress{}},
		{&transport.Progress{At: 1, Of: -5}, pullProgress{}},
	} {
		var p pullState
		p.setProgress("bob", &transport.Progress{At: 1, Of: 2}) // an earlier page's
		p.setProgress("alice", tc.in)
		if p.progress != tc.want {
			t.Errorf("%+v: kept %+v, want %+v", tc.in, p.progress, tc.want)
		}
	}
}
