package localapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/localapi/localapitest"
	"github.com/syncd/syncd/queue"
)

// subscribers runs n event subscriptions (the Go client: it reconnects
// after a 1008 with since = the last seq it read) after seq since.
// finish appends a marker event, waits until every subscriber has read
// up to it, and returns the number of reconnects.
const benchEnd = "bench.end"

func subscribers(b *testing.B, e *localapitest.Env, n int, since uint64) (finish func() int) {
	b.Helper()
	c, err := client.New(client.Config{Addr: e.Addr, Token: localapitest.Token})
	if err != nil {
		b.Fatal(err)
	}
	subs := make([]*client.Subscription, n)
	for i := range subs {
		if subs[i], err = c.Subscribe(context.Background(), client.SubscribeOptions{Since: since}); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	for _, s := range subs {
		wg.Go(func() {
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			for {
				ev, err := s.Next(ctx)
				if err != nil {
					failed.Store(err)
					return
				}
				if ev.Type == benchEnd {
					return
				}
			}
		})
	}
	return func() int {
		if _, err := e.Store.AppendEvent(context.Background(), queue.Event{Type: benchEnd}); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
		if err, ok := failed.Load().(error); ok {
			b.Fatal(err)
		}
		r := 0
		for _, s := range subs {
			r += s.Reconnects()
		}
		return r
	}
}

// BenchmarkEventFanout measures events per second delivered over real
// WebSockets to 1 and to 100 subscribers (the Go client, reading as fast
// as it can) while writers fill the queue directly. An op is one write
// (two events). events/s counts deliveries: an event to 100 subscribers
// counts 100 times.
func BenchmarkEventFanout(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			e := localapitest.Start(b, localapitest.Options{})
			finish := subscribers(b, e, n, e.Bus.LastSeq())
			b.ResetTimer()
			t0 := time.Now()
			var wg sync.WaitGroup
			var next atomic.Int64
			for range 4 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						w := queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("n%d", i), Data: json.RawMessage(`{"title":"benchmark"}`)}
						if _, err := e.Store.Apply(context.Background(), w); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			reconnects := finish()
			el := time.Since(t0)
			b.StopTimer()
			events := float64(2 * b.N)
			b.ReportMetric(events*float64(n)/el.Seconds(), "events/s")
			b.ReportMetric(events/el.Seconds(), "events/s/subscriber")
			b.ReportMetric(float64(reconnects), "reconnects")
		})
	}
}

// BenchmarkWritesWithSubscribers measures durable creates per second
// through the HTTP API (8 clients, fsync on) on two daemons side by side
// in this process: one with 100 subscribers attached and reading every
// event, one with none. Rounds alternate between them so drift (the
// disk, the machine) hits both alike. ratio is the write throughput
// with 100 subscribers over the one without (target at least 0.8). The
// subscribers read raw frames (see rawSubscribers) in this process, on
// the same cores.
func BenchmarkWritesWithSubscribers(b *testing.B) {
	const clients, subs = 8, 100
	quiet := localapitest.Start(b, localapitest.Options{Account: "alice", Durable: true})
	busy := localapitest.Start(b, localapitest.Options{Account: "alice", Durable: true})
	finish := rawSubscribers(b, busy, subs)
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var seq atomic.Int64
	round := func(e *localapitest.Env, n int) time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		var done atomic.Int64
		for range clients {
			wg.Go(func() {
				for done.Add(1) <= int64(n) {
					i := seq.Add(1)
					req, _ := http.NewRequest("POST", e.URL+"/v1/entities/note", strings.NewReader(fmt.Sprintf(`{"id":"n%d","data":{"title":"benchmark"}}`, i)))
					req.Header.Set("Authorization", "Bearer "+localapitest.Token)
					req.Header.Set("Content-Type", "application/json")
					res, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body) // so the connection is reused
					res.Body.Close()
					if res.StatusCode != 201 {
						b.Errorf("status %d", res.StatusCode)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(t0)
	}
	per := 200
	rounds := max(2, b.N/per)
	var without, with time.Duration
	b.ResetTimer()
	for range rounds {
		without += round(quiet, per)
		with += round(busy, per)
	}
	b.StopTimer()
	finish() // every subscriber got every event
	n := float64(rounds * per)
	w0, w1 := n/without.Seconds(), n/with.Seconds()
	b.ReportMetric(w0, "writes/s-no-subscribers")
	b.ReportMetric(w1, "writes/s-100-subscribers")
	b.ReportMetric(w1/w0, "ratio")
}

// rawSubscribers attaches n WebSocket subscribers that read every
// message and look at nothing but the end marker: the cost measured is
// the daemon's, not an app's JSON decoding. finish appends the marker
// and waits until every subscriber has read it; a subscriber cut off
// (1008) fails the benchmark.
func rawSubscribers(b *testing.B, e *localapitest.Env, n int) (finish func()) {
	b.Helper()
	h := http.Header{"Authorization": {"Bearer " + localapitest.Token}}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		conn, _, err := websocket.DefaultDialer.Dial("ws://"+e.Addr+"/v1/events", h)
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer conn.Close()
			buf := make([]byte, 4096) // events are far smaller
			for {
				_, r, err := conn.NextReader()
				if err == nil {
					var n int
					n, err = io.ReadFull(r, buf)
					if err == io.ErrUnexpectedEOF {
						err = nil
					}
					if bytes.Contains(buf[:n], []byte(`"type":"`+benchEnd+`"`)) {
						return
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	return func() {
		if _, err := e.Store.AppendEvent(context.Background(), queue.Event{Type: benchEnd}); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatalf("a subscriber ended early: %v", err)
		default:
		}
	}
}
