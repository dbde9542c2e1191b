package main

// How the gateway holds up under bad HTTP: bounded bodies, timeouts on every read and write that a client can
// stall, bounds on the bytes of bodies held and worked on at once, and on the requests doing engine work.
// docs/go.md ("Under bad HTTP") says what each case answers.
//
// A request goes through two stages, each with its own bounds. First its body is read, bounded in size
// (--max-body-bytes), in time (--read-body-timeout) and, summed over every body being read or not yet taken by
// the engine, in memory (--max-body-bytes-in-flight, counted as the bytes arrive). Only then is it admitted to
// engine work (admit): one of the slots of --max-concurrent-requests, and its body's bytes (with /detokenize's
// answer at its largest) counted against --max-engine-work-bytes while the engine checks, parses or tokenizes
// it. A client slow to send its body holds no slot and no engine work, so slow uploads cannot make other
// clients' requests fail, and it holds no more memory than it has sent. Work on a body costs a multiple of its
// size, so it has the smaller bound of the two.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// limits are the gateway's bounds on what one client can hold; a zero duration or count turns that bound off.
type limits struct {
	// maxBodyBytes caps a request body (413 beyond it).
	maxBodyBytes int64
	// maxBodyBytesInFlight caps the bytes of the request bodies being read, or read and not yet taken by the
	// engine, over every request (503 beyond it; 413 for a body that alone would exceed it).
	maxBodyBytesInFlight int64
	// maxEngineWorkBytes caps the bytes of the bodies (and /detokenize answers, at their largest) that the
	// engine works on at once: a submission being checked, a tokenization (503 beyond it).
	maxEngineWorkBytes int64
	// maxConcurrentRequests caps the requests doing engine work (completions, embeddings, reranking, /tokenize,
	// /detokenize), from when their body is in to their answer; one more is answered 503 at once.
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
		// Bodies being read hold their bytes, about once: sixteen bodies of the largest size, thousands of
		// ordinary ones (kilobytes). A client that sends this much and stalls holds it until
		// --read-body-timeout, then must send it again.
		maxBodyBytesInFlight: 128 << 20,
		// Work on a body costs a multiple of its size, the engine's mostly: measured (peak RSS of one
		// request), 55x for a chat of 279,000 one-letter messages (engine_submit parses and renders each),
		// 11x for /tokenize (a token per byte), 2.2x for /detokenize with its answer counted at its largest.
		// Two bodies of the largest size at once keep that under 1 GiB.
		maxEngineWorkBytes: 16 << 20,
		// Four times the engine's default max_num_seqs (64): a few steps' worth of queue in the engine,
		// and beyond that a client learns at once that it should retry rather than wait without bound.
		maxConcurrentRequests: 256,
		readHeaderTimeout:     10 * time.Second,
		readBodyTimeout:       30 * time.Second,
		writeTimeout:          30 * time.Second,
		idleTimeout:           120 * time.Second,
	}
}

// check refuses limits that contradict each other.
func (l limits) check() error {
	for _, bound := range []struct {
		name  string
		value int64
	}{{"--max-body-bytes-in-flight", l.maxBodyBytesInFlight}, {"--max-engine-work-bytes", l.maxEngineWorkBytes}} {
		if bound.value > 0 && l.maxBodyBytes > bound.value {
			return fmt.Errorf("%s %d is below --max-body-bytes %d: a body of the largest size could never be "+
				"served", bound.name, bound.value, l.maxBodyBytes)
		}
	}
	return nil
}

// configure sets an http.Server's handler and timeouts. There is no http.Server.ReadTimeout: it would keep its
// deadline on the connection while the handler runs, and net/http's background read (which notices a client
// that disconnects) would then end every request lasting longer than it. The body's deadline is set and
// cleared by the handlers instead (guard, readJSONObject). WriteTimeout gives each request a fresh write deadline
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

// byteBudget counts bytes held at once against a limit (0: none). Requests take from it and never wait for it:
// bytes that do not fit are refused at once, so that requests holding parts of a budget can never wait on one
// another.
type byteBudget struct {
	limit int64
	used  atomic.Int64
}

// reserve adds n bytes to hold, or says why it cannot: the request alone would hold more than the whole budget
// (tooMuch), or other requests hold what it lacks now (busy).
func (b *byteBudget) reserve(hold *byteHold, n int64) (tooMuch, busy bool) {
	if b.limit > 0 && hold.bytes+n > b.limit {
		return true, false
	}
	for b.limit > 0 {
		used := b.used.Load()
		if used+n > b.limit {
			return false, true
		}
		if b.used.CompareAndSwap(used, used+n) {
			hold.budget, hold.bytes = b, hold.bytes+n
			return false, false
		}
	}
	b.used.Add(n) // no limit: counted all the same, for /metrics
	hold.budget, hold.bytes = b, hold.bytes+n
	return false, false
}

// byteHold is what one request holds of a budget; release gives it back (once; later calls do nothing), as soon
// as the bytes are no longer needed. The zero value holds nothing.
type byteHold struct {
	budget *byteBudget
	bytes  int64
}

func (h *byteHold) release() {
	if h.bytes != 0 {
		h.budget.used.Add(-h.bytes)
		h.bytes = 0
	}
}

// firstBodyBuffer is how much a body with no Content-Length (or a large one) is given before its first bytes:
// more than most requests need, little for a connection that then sends nothing.
const firstBodyBuffer = 4096

// readBodyBytes reads a request body within the gateway's limits: --max-body-bytes (413: at once when the
// Content-Length says so, else once that many bytes have come), --read-body-timeout (408, with the deadline set
// by guard), and --max-body-bytes-in-flight (503, or 413 for a body the whole budget could not hold). The
// buffer grows as the bytes arrive, doubling, each growth reserved first, so a client holds about what it has
// sent, at most twice that. The caller releases the hold once the engine has taken the body, whatever the
// outcome.
func (s *server) readBodyBytes(w http.ResponseWriter, r *http.Request, hold *byteHold) (body []byte, bad *apiError) {
	s.metrics.bodiesReading.Add(1)
	defer s.metrics.bodiesReading.Add(-1)
	defer func() {
		if bad != nil {
			// What is left of the body stays unread: the connection is closed after the answer. Otherwise
			// net/http would first try to read (and discard) what is left, waiting on a client that stalls.
			w.Header().Set("Connection", "close")
		}
	}()
	maxBody := s.limits.maxBodyBytes
	if maxBody > 0 && r.ContentLength > maxBody {
		return nil, tooLarge(maxBody) // from the headers alone, before the body is sent
	}
	size := int64(firstBodyBuffer)
	if r.ContentLength >= 0 && r.ContentLength < size {
		size = r.ContentLength
	}
	if bad := s.reserveBody(hold, size); bad != nil {
		return nil, bad
	}
	body = make([]byte, 0, size)
	for {
		if len(body) == cap(body) {
			if int64(len(body)) == r.ContentLength {
				// Every announced byte is in; one more read sees the end, which is also what starts net/http's
				// watch for the client going away (the request's context ends when it does).
				var end [1]byte
				n, err := r.Body.Read(end[:])
				if n == 0 && err == io.EOF {
					return body, nil
				}
				if err == nil || err == io.EOF {
					err = errors.New("more bytes than the Content-Length")
				}
				return nil, s.bodyReadError(err)
			}
			grown := max(2*int64(cap(body)), firstBodyBuffer)
			if r.ContentLength > 0 {
				grown = min(grown, r.ContentLength) // the exact size: no byte reserved that cannot come
			}
			if maxBody > 0 {
				grown = min(grown, maxBody+1) // room for the byte that tells a body over the limit
			}
			if bad := s.reserveBody(hold, grown-int64(cap(body))); bad != nil {
				return nil, bad
			}
			bigger := make([]byte, len(body), grown)
			copy(bigger, body)
			body = bigger
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			return body, nil
		}
		if err != nil {
			return nil, s.bodyReadError(err)
		}
	}
}

// reserveBody reserves n more bytes of --max-body-bytes-in-flight for a body being read.
func (s *server) reserveBody(hold *byteHold, n int64) *apiError {
	tooMuch, busy := s.bodyBytes.reserve(hold, n)
	switch {
	case tooMuch:
		e := newAPIError(http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf(
			"the request body is larger than the %d bytes that the gateway holds of all bodies at once "+
				"(--max-body-bytes-in-flight)", s.bodyBytes.limit), "")
		return &e
	case busy:
		e := newAPIError(http.StatusServiceUnavailable, "server_error", fmt.Sprintf("the gateway holds its limit of "+
			"%d bytes of request bodies being read (--max-body-bytes-in-flight): retry later", s.bodyBytes.limit), "")
		e.retryAfter = true
		return &e
	}
	return nil
}

// bodyReadError says why a body could not be read, naming the limit when one was hit.
func (s *server) bodyReadError(err error) *apiError {
	var overLimit *http.MaxBytesError
	switch {
	case errors.As(err, &overLimit):
		return tooLarge(overLimit.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		e := newAPIError(http.StatusRequestTimeout, "invalid_request_error",
			fmt.Sprintf("the request body did not arrive within %s (--read-body-timeout)", s.limits.readBodyTimeout), "")
		return &e
	}
	e := invalidRequest("cannot read the request body: "+err.Error(), "")
	return &e
}

func tooLarge(limit int64) *apiError {
	e := newAPIError(http.StatusRequestEntityTooLarge, "invalid_request_error",
		fmt.Sprintf("the request body is larger than %d bytes (--max-body-bytes)", limit), "")
	return &e
}

// admission is what a request admitted to engine work holds: a slot of --max-concurrent-requests and its bytes
// of --max-engine-work-bytes. done gives both back (once).
type admission struct {
	s    *server
	work byteHold
	once sync.Once
}

func (a *admission) done() {
	a.once.Do(func() {
		a.work.release()
		a.s.metrics.admitted.Add(-1)
		a.s.active.Done()
		if a.s.slots != nil {
			<-a.s.slots
		}
	})
}

// admit admits a request whose body is in to engine work on work bytes (its body; /detokenize adds its answer),
// or refuses it at once with a 503: a queue without bound would hold every client's connection and memory while
// each waits longer than it would take it to retry; and while the gateway shuts down, another replica can take
// it. tooMuch: the work alone is more than --max-engine-work-bytes (the caller names what is too large).
func (s *server) admit(r *http.Request, work int64) (a *admission, tooMuch bool, refusal *apiError) {
	if s.draining.Load() {
		e := newAPIError(http.StatusServiceUnavailable, "server_error", "the gateway is shutting down", "")
		e.retryAfter = true
		return nil, false, &e
	}
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
		default:
			e := newAPIError(http.StatusServiceUnavailable, "server_error", fmt.Sprintf(
				"the gateway is serving its limit of %d concurrent requests (--max-concurrent-requests): retry later",
				cap(s.slots)), "")
			e.retryAfter = true
			return nil, false, &e
		}
	}
	a = &admission{s: s}
	tooMuch, busy := s.workBytes.reserve(&a.work, work)
	if tooMuch || busy {
		if s.slots != nil {
			<-s.slots
		}
		if tooMuch {
			return nil, true, nil
		}
		e := newAPIError(http.StatusServiceUnavailable, "server_error", fmt.Sprintf("the engine is working on its "+
			"limit of %d bytes of request bodies (--max-engine-work-bytes): retry later", s.workBytes.limit), "")
		e.retryAfter = true
		return nil, false, &e
	}
	s.active.Add(1)
	s.metrics.admitted.Add(1)
	if s.onAdmit != nil {
		s.onAdmit(r)
	}
	return a, false, nil
}

// bodyTooLargeForWork is the 413 of a body that alone is more than --max-engine-work-bytes (possible only with
// --max-body-bytes above it, or 0).
func (s *server) bodyTooLargeForWork() *apiError {
	e := newAPIError(http.StatusRequestEntityTooLarge, "invalid_request_error", fmt.Sprintf(
		"the request body is larger than the %d bytes that the engine works on at once (--max-engine-work-bytes)",
		s.workBytes.limit), "")
	return &e
}

// clientGone says whether the client has gone away (net/http ends the request's context when its connection
// closes, which it watches once the body has been read to its end). Checked before any engine work: an engine
// call cannot be stopped half-way (a request's submission, which may compile a grammar, or a tokenization), so
// none is started for a client that will not read its answer.
func clientGone(ctx context.Context) bool { return ctx.Err() != nil }
