// Package faultproxy is a fault-injecting HTTP proxy for end-to-end
// tests: it listens on loopback between the daemon's transport and a real
// remote server and, per request, forwards it, drops the server's answer
// after the server committed, resets the connection, delays or holds the
// request, or answers by itself (429, 503 with Retry-After, ...). It logs
// every request so tests can count what reached the server.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Kind is what the proxy does with one request.
type Kind int

// The kinds of Action.
const (
	// Forward sends the request to the server and its answer back.
	Forward Kind = iota
	// DropResponse forwards the request, reads the server's whole answer
	// (the server committed), then resets the client's connection
	// without replying: "server committed, response lost".
	DropResponse
	// Reset resets the client's connection before forwarding: the server
	// never sees the request (as when offline).
	Reset
	// Respond answers Status (with Retry-After if set) without
	// forwarding.
	Respond
	// Delay waits Action.Delay, then forwards, even if the client gave
	// up meanwhile: the request was already on its way.
	Delay
	// Hold waits until Action.Hold is closed, then forwards, even if
	// the client gave up meanwhile.
	Hold
)

var kindNames = [...]string{"forward", "drop_response", "reset", "respond", "delay", "hold"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Action is the fault for one request.
type Action struct {
	Kind       Kind
	Status     int           // Respond
	RetryAfter string        // Respond: the Retry-After header, if set
	Delay      time.Duration // Delay
	Hold       <-chan struct{}
}

// Request is what a Rule sees of a request.
type Request struct {
	Seq    int // 1-based, over all requests
	Method string
	Path   string
	Key    string // Idempotency-Key
	Token  string // bearer token
	// KeySeen counts the requests with this Idempotency-Key so far,
	// this one included (1 for the first).
	KeySeen int
	Body    []byte
}

// Rule picks the action for a request. It runs on the request's
// goroutine, one request at a time.
type Rule func(Request) Action

// Entry is the log of one request.
type Entry struct {
	Request
	Action Kind
	// Forwarded is true when the server received the request;
	// ServerStatus and ServerBody are its answer (whether or not the
	// client got it).
	Forwarded    bool
	ServerStatus int
	ServerBody   []byte
	// Delivered is true when the client got an answer (Status).
	Delivered bool
	Status    int
	Err       error
}

// Proxy is a running fault proxy.
type Proxy struct {
	target string
	ln     net.Listener
	srv    *http.Server
	hc     *http.Client
	done   chan struct{}
	served chan struct{}

	mu      sync.Mutex
	rule    Rule
	log     []Entry
	keys    map[string]int
	changed chan struct{} // closed and replaced at every log change
}

// New starts a proxy on 127.0.0.1 in front of target (a base URL such as
// "http://127.0.0.1:8080"). Every request is forwarded until SetRule.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	p := &Proxy{
		target: target,
		ln:     ln,
		// A proxy relays a redirect; it does not follow it.
		hc:      &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		done:    make(chan struct{}),
		served:  make(chan struct{}),
		keys:    make(map[string]int),
		changed: make(chan struct{}),
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ErrorLog: nil}
	go func() {
		defer close(p.served)
		p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is the proxy's base URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetTarget points the proxy at another server (a restarted one).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.hc.CloseIdleConnections()
}

// SetRule sets the rule for the requests to come; nil forwards all.
func (p *Proxy) SetRule(r Rule) {
	p.mu.Lock()
	p.rule = r
	p.mu.Unlock()
}

// Close stops the proxy, releasing held and delayed requests without
// forwarding them, and waits for its handlers.
func (p *Proxy) Close() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	close(p.done)
	err := p.srv.Close()
	<-p.served
	p.hc.CloseIdleConnections()
	return err
}

// Log returns a copy of every request's entry so far, in arrival order.
func (p *Proxy) Log() []Entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Entry(nil), p.log...)
}

// Wait blocks until cond holds for the log, or ctx ends.
func (p *Proxy) Wait(ctx context.Context, cond func([]Entry) bool) error {
	for {
		p.mu.Lock()
		ok := cond(p.log)
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("faultproxy: wait: %w", ctx.Err())
		}
	}
}

// update changes entry i of the log and wakes waiters.
func (p *Proxy) update(i int, f func(*Entry)) {
	p.mu.Lock()
	f(&p.log[i])
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := Request{
		Method: r.Method,
		Path:   r.URL.RequestURI(),
		Key:    r.Header.Get("Idempotency-Key"),
		Body:   body,
	}
	if tok, ok := bytes.CutPrefix([]byte(r.Header.Get("Authorization")), []byte("Bearer ")); ok {
		req.Token = string(tok)
	}
	p.mu.Lock()
	if req.Key != "" {
		p.keys[req.Key]++
		req.KeySeen = p.keys[req.Key]
	}
	req.Seq = len(p.log) + 1
	rule, target := p.rule, p.target
	var a Action
	if rule != nil {
		a = rule(req)
	}
	i := len(p.log)
	p.log = append(p.log, Entry{Request: req, Action: a.Kind})
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()

	switch a.Kind {
	case Reset:
		p.update(i, func(e *Entry) { e.Err = errors.New("reset") })
		reset(w)
		return
	case Respond:
		if a.RetryAfter != "" {
			w.Header().Set("Retry-After", a.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.Status)
		fmt.Fprintf(w, `{"error":{"code":"fault_%d","message":"injected by faultproxy"}}`, a.Status)
		p.update(i, func(e *Entry) { e.Delivered, e.Status = true, a.Status })
		return
	case Delay:
		t := time.NewTimer(a.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.done:
			reset(w)
			return
		}
	case Hold:
		select {
		case <-a.Hold:
		case <-p.done:
			reset(w)
			return
		}
	}

	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		p.update(i, func(e *Entry) { e.Err = err })
		reset(w)
		return
	}
	for k, v := range r.Header {
		out.Header[k] = v
	}
	resp, err := p.hc.Do(out)
	if err != nil {
		p.update(i, func(e *Entry) { e.Err = err })
		reset(w)
		return
	}
	rbody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.update(i, func(e *Entry) {
		e.Forwarded, e.ServerStatus, e.ServerBody, e.Err = true, resp.StatusCode, rbody, err
	})
	if err != nil || a.Kind == DropResponse {
		reset(w)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(rbody)
	p.update(i, func(e *Entry) { e.Delivered, e.Status = true, resp.StatusCode })
}

// reset closes the client's connection with a TCP reset, answering
// nothing.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// Count returns how many logged entries satisfy f.
func Count(log []Entry, f func(Entry) bool) int {
	n := 0
	for _, e := range log {
		if f(e) {
			n++
		}
	}
	return n
}

// Forwarded reports whether an entry reached the server.
func Forwarded(e Entry) bool { return e.Forwarded }
