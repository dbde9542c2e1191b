package ember

// #include "handles.h"
import "C"

import (
	"context"
	"io"
	"iter"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// pollIntervalMs bounds each wait inside engine_poll / engine_next_chunk_json (milliseconds). A reader blocked
// in C cannot see its context end, so it waits in slices of this length and checks between them: a cancelled
// context reaches engine_cancel within this time plus one engine step.
const pollIntervalMs = 100

// EventKind says what an Event reports.
type EventKind uint32

// The event kinds a reader sees; the C API's ERROR event is returned as a *RequestFailedError instead.
const (
	EventDelta    EventKind = C.ENGINE_EVENT_KIND_DELTA
	EventFinished EventKind = C.ENGINE_EVENT_KIND_FINISHED
	eventError    EventKind = C.ENGINE_EVENT_KIND_ERROR
)

// FinishReason says why a choice ended.
type FinishReason uint32

const (
	FinishNone      FinishReason = C.ENGINE_FINISH_REASON_NONE
	FinishStop      FinishReason = C.ENGINE_FINISH_REASON_STOP
	FinishLength    FinishReason = C.ENGINE_FINISH_REASON_LENGTH
	FinishCancelled FinishReason = C.ENGINE_FINISH_REASON_CANCELLED
	FinishError     FinishReason = C.ENGINE_FINISH_REASON_ERROR
	// FinishDeadline: the request's deadline_ms passed; its output so far stands.
	FinishDeadline FinishReason = C.ENGINE_FINISH_REASON_DEADLINE
)

// String is the reason as response bodies write it (`finish_reason`, docs/protocol.md); "" for FinishNone.
func (r FinishReason) String() string {
	switch r {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishCancelled:
		return "cancelled"
	case FinishError:
		return "error"
	case FinishDeadline:
		return "deadline"
	}
	return ""
}

// Event is one step of a request: new text of a choice, or the end of a choice.
type Event struct {
	Kind EventKind
	// Choice is the index of the choice the event is about.
	Choice int
	// Text is a delta's new text: UTF-8, never a partial character. Empty for EventFinished.
	Text string
	// NumTokens is how many generated tokens a delta's text covers (a token may produce no text on its own).
	NumTokens int
	// FinishReason is why the choice ended (EventFinished only).
	FinishReason FinishReason
}

// Request is a submitted request. Read it with Next / Events (text deltas) or with NextChunk / Chunks (OpenAI
// streaming chunk bodies), not both: both take the same events. The readers are for one goroutine at a time;
// Cancel, Close, the metrics and ResponseJSON are safe from any goroutine. Close it when done (this cancels it
// if it still runs); a finalizer closes a forgotten one.
type Request struct {
	engine *Engine
	// handle is the EngineRequest* of ember.h as a number (handles.h says why).
	handle C.uintptr_t
	// ctx is Submit's context: when it ends, the next read cancels the request.
	ctx    context.Context
	closed atomic.Bool

	// The reader's state.
	cancelSent bool
	// end is what every read returns once the request has ended: io.EOF, ctx.Err() or a *RequestFailedError.
	end error
}

func newRequest(ctx context.Context, engine *Engine, handle C.uintptr_t) *Request {
	r := &Request{engine: engine, handle: handle, ctx: ctx}
	runtime.SetFinalizer(r, (*Request).Close)
	return r
}

// Next returns the next event: a choice's new text, or a choice's end. After the last choice has ended it
// returns io.EOF. When Submit's context has ended, Next cancels the request, waits until the engine has ended
// it (dropping its last events), and returns ctx.Err(). A request the engine failed is a *RequestFailedError;
// an *Error means the request or its engine was closed. Once Next has returned an error it returns it again.
func (r *Request) Next() (Event, error) {
	defer runtime.KeepAlive(r)
	for r.end == nil {
		r.cancelIfContextEnded()
		event, status, err := r.poll()
		switch {
		case err != nil:
			return Event{}, err
		case status == StatusTimeout:
			continue
		case status == StatusStreamDone:
			// engine_poll has handed out the final event (the last choice's FINISHED): the stream is over.
			r.end = r.endOfStream()
			continue
		case event.Kind == eventError:
			// The final event of a failed request; no FINISHED follows for its unfinished choices.
			r.end = &RequestFailedError{Message: event.Text}
			continue
		}
		if !r.cancelSent {
			return event, nil
		}
	}
	return Event{}, r.end
}

// Events iterates over Next's events until the request ends; a failure is the last pair's error. io.EOF is not
// passed on: the loop simply ends.
func (r *Request) Events() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			event, err := r.Next()
			if err == io.EOF || !yield(event, err) || err != nil {
				return
			}
		}
	}
}

// Wait reads the request's events until it ends; nil when it ran to its end (stop, length, or cancelled by
// Cancel), ctx.Err() when Submit's context ended first.
func (r *Request) Wait() error {
	for _, err := range r.Events() {
		if err != nil {
			return err
		}
	}
	return nil
}

// NextChunk returns the next OpenAI streaming chunk body (`chat.completion.chunk` or `text_completion` JSON,
// without the `data: ` framing), and io.EOF after the last one (an HTTP server then sends `data: [DONE]`). The
// last body may be a usage chunk, or an `{"error": ...}` body when the engine failed the request. Context and
// errors are handled as by Next.
func (r *Request) NextChunk() ([]byte, error) {
	defer runtime.KeepAlive(r)
	for r.end == nil {
		r.cancelIfContextEnded()
		var out *C.char
		status, err := call("engine_next_chunk_json", func() C.EngineStatus {
			return C.ember_go_next_chunk_json(r.engine.handle, r.handle, pollIntervalMs, &out)
		}, StatusTimeout, StatusStreamDone)
		switch {
		case err != nil:
			return nil, err
		case status == StatusStreamDone:
			r.end = r.endOfStream()
		case status == StatusOK:
			chunk := takeString(out)
			if !r.cancelSent {
				return chunk, nil
			}
		}
	}
	return nil, r.end
}

// Chunks iterates over NextChunk's bodies until the stream ends; a failure is the last pair's error.
func (r *Request) Chunks() iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for {
			chunk, err := r.NextChunk()
			if err == io.EOF || !yield(chunk, err) || err != nil {
				return
			}
		}
	}
}

// ResponseJSON is the whole OpenAI response body of the ended request (`chat.completion` or `text_completion`,
// with `usage` and, when enabled and asked for, `metrics`). A request still running is an *Error with
// StatusNotFinished.
func (r *Request) ResponseJSON() ([]byte, error) {
	defer runtime.KeepAlive(r)
	var out *C.char
	_, err := call("engine_response_json", func() C.EngineStatus { return C.ember_go_response_json(r.handle, &out) })
	if err != nil {
		return nil, err
	}
	return takeString(out), nil
}

// Cancel asks the engine to stop the request: its unfinished choices end with FinishCancelled, and text already
// generated stays readable. Cancelling an ended request does nothing.
func (r *Request) Cancel() error {
	defer runtime.KeepAlive(r)
	_, err := call("engine_cancel", func() C.EngineStatus { return C.ember_go_cancel(r.handle) })
	return err
}

// Close frees the request, cancelling it if it still runs. A reader blocked in another goroutine returns an
// *Error (StatusInvalidHandle). Calling Close again does nothing.
func (r *Request) Close() {
	if !r.closed.CompareAndSwap(false, true) {
		return
	}
	runtime.SetFinalizer(r, nil)
	C.ember_go_request_free(r.handle)
}

// cancelIfContextEnded tells the engine, once, that Submit's context has ended; the reader then drains the
// events the cancellation produces, so that it returns only when the engine has ended the request.
func (r *Request) cancelIfContextEnded() {
	if r.cancelSent || r.ctx.Err() == nil {
		return
	}
	r.cancelSent = true
	// A failure here means the request or the engine was closed; the next poll reports that.
	_ = r.Cancel()
}

// endOfStream is what the readers return once the engine has ended the request.
func (r *Request) endOfStream() error {
	if r.cancelSent {
		return r.ctx.Err()
	}
	return io.EOF
}

// poll takes one event, waiting at most pollIntervalMs: StatusOK with the event, StatusTimeout, or
// StatusStreamDone once the final event has been taken. Its text is copied before the locked thread can poll
// again: ember keeps it only until this thread's next poll of the request.
func (r *Request) poll() (Event, Status, error) {
	var event Event
	status, err := call("engine_poll", func() C.EngineStatus {
		var out C.EngineEvent
		status := C.ember_go_poll(r.engine.handle, r.handle, pollIntervalMs, &out)
		if status == C.ENGINE_STATUS_OK {
			event = Event{
				Kind:         EventKind(out.kind),
				Choice:       int(out.choice),
				NumTokens:    int(out.num_tokens),
				FinishReason: FinishReason(out.finish_reason),
			}
			if out.text != nil {
				event.Text = C.GoStringN(out.text, C.int(out.text_len))
			}
		}
		return status
	}, StatusTimeout, StatusStreamDone)
	return event, status, err
}

// takeString copies a string ember handed over and frees it (engine_string_free).
func takeString(owned *C.char) []byte {
	defer C.engine_string_free(owned)
	return C.GoBytes(unsafe.Pointer(owned), C.int(C.strlen(owned)))
}
