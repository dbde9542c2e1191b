package ember

// #include "handles.h"
import "C"

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// EventKind says what an Event reports.
type EventKind uint32

// The event kinds a reader sees; the C API's ERROR event is returned as a *RequestFailedError instead.
const (
	EventDelta    EventKind = C.EMBER_EVENT_KIND_DELTA
	EventFinished EventKind = C.EMBER_EVENT_KIND_FINISHED
	eventError    EventKind = C.EMBER_EVENT_KIND_ERROR
	// EventPromptProgress: how far a prompt has been computed (Event.Progress), before its first token; only for
	// a request whose body has `"return_progress": true`.
	EventPromptProgress EventKind = C.EMBER_EVENT_KIND_PROMPT_PROGRESS
	// The kinds of a request submitted with SubmitStream: a chunk body, and the stream's end.
	eventChunk      EventKind = C.EMBER_EVENT_KIND_CHUNK
	eventStreamDone EventKind = C.EMBER_EVENT_KIND_STREAM_DONE
)

// FinishReason says why a choice ended.
type FinishReason uint32

const (
	FinishNone      FinishReason = C.EMBER_FINISH_REASON_NONE
	FinishStop      FinishReason = C.EMBER_FINISH_REASON_STOP
	FinishLength    FinishReason = C.EMBER_FINISH_REASON_LENGTH
	FinishCancelled FinishReason = C.EMBER_FINISH_REASON_CANCELLED
	FinishError     FinishReason = C.EMBER_FINISH_REASON_ERROR
	// FinishDeadline: the request's deadline_ms passed; its output so far stands.
	FinishDeadline FinishReason = C.EMBER_FINISH_REASON_DEADLINE
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

// Event is one step of a request: new text of a choice, the end of a choice, or (asked for with
// `return_progress`) how far a prompt has been computed.
type Event struct {
	Kind EventKind
	// Choice is the index of the choice the event is about.
	Choice int
	// Text is a delta's new text: UTF-8, never a partial character. Empty for EventFinished; for
	// EventPromptProgress, llama-server's `prompt_progress` JSON object, which Progress holds decoded.
	Text string
	// NumTokens is how many generated tokens a delta's text covers (a token may produce no text on its own); for
	// EventPromptProgress, Progress.Processed.
	NumTokens int
	// FinishReason is why the choice ended (EventFinished only).
	FinishReason FinishReason
	// Progress is how far the prompt of choice Choice (the first of its prompt) has been computed
	// (EventPromptProgress only; nil otherwise).
	Progress *PromptProgress
}

// Request is a submitted request. A request from Submit is read with Next / Events (text deltas), one from
// SubmitStream with NextChunk / Chunks (OpenAI streaming chunk bodies); Wait reads either. The readers are for one
// goroutine at a time, and wait in Go: the engine's one dispatcher goroutine hands them their events, so an open
// request holds no OS thread. Cancel, Close, the metrics and ResponseJSON are safe from any goroutine. Close it
// when done (this cancels it if it still runs); a finalizer closes a forgotten one.
type Request struct {
	engine *Engine
	// handle is the EmberRequest* of ember.h as a number (handles.h says why).
	handle C.uintptr_t
	// id is the request's user_data at the engine's waiting point; box is where the dispatcher puts its events.
	id  uint64
	box *inbox
	// chunks: submitted with SubmitStream (its events are chunk bodies).
	chunks bool
	// ctx is Submit's context: when it ends, the next read cancels the request.
	ctx    context.Context
	closed atomic.Bool

	// The reader's state.
	cancelSent bool
	// end is what every read returns once the request has ended: io.EOF, ctx.Err() or a *RequestFailedError.
	end error
}

func newRequest(ctx context.Context, engine *Engine, handle C.uintptr_t, id uint64, box *inbox, chunks bool) *Request {
	r := &Request{engine: engine, handle: handle, id: id, box: box, chunks: chunks, ctx: ctx}
	runtime.SetFinalizer(r, (*Request).Close)
	return r
}

// Next returns the next event: a choice's new text, or a choice's end (and, with `return_progress`, how far the
// prompt has been computed, before its first token). After the last choice has ended it
// returns io.EOF. When Submit's context has ended, Next cancels the request, waits until the engine has ended
// it (dropping its last events), and returns ctx.Err(). A request the engine failed is a *RequestFailedError;
// an *Error means the request or its engine was closed. Once Next has returned an error it returns it again.
func (r *Request) Next() (Event, error) {
	defer runtime.KeepAlive(r)
	if r.chunks && r.end == nil {
		return Event{}, wrongReader("Next", "SubmitStream", "NextChunk or Chunks")
	}
	for r.end == nil {
		r.cancelIfContextEnded()
		it := r.take()
		switch {
		case it.failure != nil:
			r.end = it.failure
		case it.event.Kind == eventError:
			// The final event of a failed request; no FINISHED follows for its unfinished choices.
			r.end = &RequestFailedError{Message: it.event.Text}
		default:
			if it.last {
				// The last choice's FINISHED: the stream is over after it.
				r.end = r.endOfStream()
			}
			if !r.cancelSent {
				if it.event.Kind == EventPromptProgress {
					it.event.Progress = parsePromptProgress(it.event.Text)
				}
				return it.event, nil
			}
		}
	}
	return Event{}, r.end
}

// wrongReader is the error of a reader called on a request submitted the other way.
func wrongReader(op, submittedWith, readWith string) error {
	return &Error{Op: op, Status: StatusInvalidArgument,
		Message: "the request was submitted with " + submittedWith + ": read it with " + readWith}
}

// take waits for the request's next item. When Submit's context ends meanwhile, it cancels the request (once)
// and goes on waiting: the engine then ends it, and the readers drop what comes after the cancellation.
func (r *Request) take() item {
	for {
		if it, ok := r.box.take(); ok {
			return it
		}
		var ctxDone <-chan struct{}
		if !r.cancelSent {
			ctxDone = r.ctx.Done()
		}
		select {
		case <-r.box.signal:
		case <-ctxDone:
			r.cancelIfContextEnded()
		}
	}
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

// Wait reads the request's events (or chunks) until it ends; nil when it ran to its end (stop, length, or
// cancelled by Cancel), ctx.Err() when Submit's context ended first.
func (r *Request) Wait() error {
	if r.chunks {
		for _, err := range r.Chunks() {
			if err != nil {
				return err
			}
		}
		return nil
	}
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
	if !r.chunks && r.end == nil {
		return nil, wrongReader("NextChunk", "Submit", "Next or Events (or submit with SubmitStream)")
	}
	for r.end == nil {
		r.cancelIfContextEnded()
		it := r.take()
		switch {
		case it.failure != nil:
			r.end = it.failure
		case it.event.Kind == eventStreamDone:
			r.end = r.endOfStream()
		case !r.cancelSent:
			return it.chunk, nil
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
	_, err := call("engine_response_json", func() C.EmberStatus { return C.ember_go_response_json(r.handle, &out) })
	if err != nil {
		return nil, err
	}
	return takeString(out), nil
}

// Warnings are the request's fields accepted although they have no effect on this model (`verbosity`;
// `reasoning_effort` on a chat template without a reasoning setting), each saying why (engine_request_warnings_json).
func (r *Request) Warnings() ([]string, error) {
	defer runtime.KeepAlive(r)
	var out *C.char
	_, err := call("engine_request_warnings_json", func() C.EmberStatus {
		return C.ember_go_request_warnings_json(r.handle, &out)
	})
	if err != nil {
		return nil, err
	}
	var warnings []string
	if err := json.Unmarshal(takeString(out), &warnings); err != nil {
		return nil, err
	}
	return warnings, nil
}

// Cancel asks the engine to stop the request: its unfinished choices end with FinishCancelled, and text already
// generated stays readable. Cancelling an ended request does nothing.
func (r *Request) Cancel() error {
	defer runtime.KeepAlive(r)
	_, err := call("engine_cancel", func() C.EmberStatus { return C.ember_go_cancel(r.handle) })
	return err
}

// Close frees the request, cancelling it if it still runs. A reader blocked in another goroutine returns an
// *Error (StatusInvalidHandle). Calling Close again does nothing.
func (r *Request) Close() {
	if !r.closed.CompareAndSwap(false, true) {
		return
	}
	runtime.SetFinalizer(r, nil)
	r.engine.dispatch.forget(r.id)
	r.box.fail(&Error{Op: "engine_request_free", Status: StatusInvalidHandle, Message: "the request is closed"})
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

// takeString copies a string ember handed over and frees it (engine_string_free).
func takeString(owned *C.char) []byte {
	defer C.engine_string_free(owned)
	return C.GoBytes(unsafe.Pointer(owned), C.int(C.strlen(owned)))
}
