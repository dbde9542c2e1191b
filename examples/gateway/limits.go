package main

// How the gateway holds up under bad HTTP: bounded bodies, timeouts on every read and write that a client can
// stall, and a bound on the completion requests in flight. docs/go.md ("Under bad HTTP") says what each case
// answers.

import (
	"net/http"
	"time"
)

// limits are the gateway's bounds on what one client can hold; a zero duration or count turns that bound off.
type limits struct {
	// maxBodyBytes caps a request body (413 beyond it).
	maxBodyBytes int64
	// maxConcurrentRequests caps the completion requests in flight; one more is answered 503 at once.
	maxConcurrentRequests int
	// readHeaderTimeout is how long a client may take to send a request's headers (http.Server's own).
	readHeaderTimeout time.Duration
	// readBodyTimeout is how long the body may take to arrive once the headers are in (408 beyond it).
	readBodyTimeout time.Duration
	// writeTimeout is how long one write to the client may block: it is refreshed before every write, so a
	// long stream lives as long as its client reads, and a client that stops reading is dropped.
	writeTimeout time.Duration
	// idleTimeout is how long a keep-alive connection may wait for its next request.
	idleTimeout time.Duration
}

// defaultLimits are the flags' defaults.
func defaultLimits() limits {
	return limits{
		maxBodyBytes: 8 << 20, // 8 MiB: far above any prompt the model's context can hold
		// Four times the engine's default max_num_seqs (64): a few steps' worth of queue in the engine,
		// and beyond that a client learns at once that it should retry rather than wait without bound.
		maxConcurrentRequests: 256,
		readHeaderTimeout:     10 * time.Second,
		readBodyTimeout:       30 * time.Second,
		writeTimeout:          30 * time.Second,
		idleTimeout:           120 * time.Second,
	}
}

// configure sets an http.Server's handler and timeouts. There is no http.Server.ReadTimeout: it would keep its
// deadline on the connection while the handler runs, and net/http's background read (which notices a client
// that disconnects) would then end every request lasting longer than it. The body's deadline is set and
// cleared by the handlers instead (guard, readBody). WriteTimeout gives each request a fresh write deadline
// from its start, for what net/http writes itself (100 Continue, errors about malformed requests); the
// handlers push it forward before each of their writes.
func (s *server) configure(h *http.Server) {
	h.Handler = s.routes()
	h.ReadHeaderTimeout = s.limits.readHeaderTimeout
	h.WriteTimeout = s.limits.writeTimeout
	h.IdleTimeout = s.limits.idleTimeout
}

// guard bounds a request before its handler runs: the body's size and the time it may take to arrive, and the
// time each write may block. The handler answers through the returned writer.
func (s *server) guard(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	rc := http.NewResponseController(w)
	if s.limits.readBodyTimeout > 0 {
		// Also bounds net/http's reading of what a handler left of the body, after it returns.
		_ = rc.SetReadDeadline(time.Now().Add(s.limits.readBodyTimeout))
	}
	if s.limits.maxBodyBytes > 0 {
		// The server's own writer, not the wrapper below: MaxBytesReader tells it to close the connection
		// after the 413 rather than read the rest of a huge body.
		r.Body = http.MaxBytesReader(w, r.Body, s.limits.maxBodyBytes)
	}
	if s.limits.writeTimeout <= 0 {
		return w
	}
	return &deadlineWriter{ResponseWriter: w, rc: rc, timeout: s.limits.writeTimeout}
}

// deadlineWriter refreshes the connection's write deadline before each write and flush, so that the deadline
// bounds how long one write blocks, not how long the response takes.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush calls.
func (d *deadlineWriter) FlushError() error {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer (SetReadDeadline, SetWriteDeadline).
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
