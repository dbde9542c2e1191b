package ember

// #include "handles.h"
import "C"

import (
	"fmt"
	"runtime"
	"slices"
)

// Status is an EmberStatus of the C API (include/ember.h). The numbers are ABI: never renumbered, never reused.
type Status uint32

const (
	StatusOK                Status = C.EMBER_STATUS_OK
	StatusInvalidArgument   Status = C.EMBER_STATUS_INVALID_ARGUMENT
	StatusInvalidUTF8       Status = C.EMBER_STATUS_INVALID_UTF8
	StatusInvalidHandle     Status = C.EMBER_STATUS_INVALID_HANDLE
	StatusInvalidConfig     Status = C.EMBER_STATUS_INVALID_CONFIG
	StatusModelLoadFailed   Status = C.EMBER_STATUS_MODEL_LOAD_FAILED
	StatusEngineStartFailed Status = C.EMBER_STATUS_ENGINE_START_FAILED
	// StatusInvalidRequest: the request was refused; the error's Message is an OpenAI error body.
	StatusInvalidRequest Status = C.EMBER_STATUS_INVALID_REQUEST
	StatusTimeout        Status = C.EMBER_STATUS_TIMEOUT
	// StatusNotFinished: ResponseJSON of a request still running.
	StatusNotFinished    Status = C.EMBER_STATUS_NOT_FINISHED
	StatusStreamDone     Status = C.EMBER_STATUS_STREAM_DONE
	StatusBufferTooSmall Status = C.EMBER_STATUS_BUFFER_TOO_SMALL
	// StatusChoiceOutOfRange: a choice index at or beyond the request's number of choices.
	StatusChoiceOutOfRange Status = C.EMBER_STATUS_CHOICE_OUT_OF_RANGE
	StatusTooManyHandles   Status = C.EMBER_STATUS_TOO_MANY_HANDLES
	// StatusPanic: a bug inside ember, caught at the C boundary.
	StatusPanic Status = C.EMBER_STATUS_PANIC
	// StatusForked: a handle used in a child forked from the process that created it; create engines after fork.
	StatusForked Status = C.EMBER_STATUS_FORKED
	// StatusOverloaded: max_waiting_requests requests already wait to start; nothing was queued, retry later.
	// The error's Message is an OpenAI error body with code "overloaded".
	StatusOverloaded Status = C.EMBER_STATUS_OVERLOADED
	// StatusLoadCancelled: Config.LoadProgress returned false; no engine was created.
	StatusLoadCancelled Status = C.EMBER_STATUS_LOAD_CANCELLED
)

// String is ember's static English description of the status (engine_status_message).
func (s Status) String() string {
	return C.GoString(C.engine_status_message(C.uint32_t(s)))
}

// Error makes a Status an error value, so that errors.Is(err, ember.StatusOverloaded) tests a failure's status
// (an *Error matches the Status it carries).
func (s Status) Error() string {
	return "ember: " + s.String()
}

// Error is a failed call of the C API: which function, its status, and engine_last_error_message() read right
// after it. After StatusInvalidRequest and StatusOverloaded, Message is the OpenAI error body
// `{"error": {"message", "type", "param", "code"}}`, which an HTTP server can return as it is.
type Error struct {
	Op      string
	Status  Status
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("ember: %s: %s: %s", e.Op, e.Status.String(), e.Message)
}

// Is reports whether target is the Status this error carries: errors.Is(err, ember.StatusOverloaded).
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// RequestFailedError says the engine failed a request mid-way (an ERROR event): the message is ember's.
type RequestFailedError struct {
	Message string
}

func (e *RequestFailedError) Error() string {
	return "ember: the engine failed the request: " + e.Message
}

// call runs one C function and turns its status into an error, unless the status is success or one of
// `answers` (statuses that are answers rather than failures, such as StatusTimeout for a poll).
//
// engine_last_error_message() describes the calling OS thread's last ember call, and a goroutine may move to
// another thread between two cgo calls; so the function and the message read run on one locked thread. `f`
// also runs under that lock, so it may copy out data that ember keeps per thread (a polled event's text).
func call(op string, f func() C.EmberStatus, answers ...Status) (Status, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := Status(f())
	if status == StatusOK || slices.Contains(answers, status) {
		return status, nil
	}
	return status, &Error{Op: op, Status: status, Message: C.GoString(C.engine_last_error_message())}
}

// Version is the library's "MAJOR.MINOR.PATCH" (engine_version).
func Version() string {
	return C.GoString(C.engine_version())
}

// HeaderVersion is the version of the include/ember.h this package was compiled against; it should equal
// Version() in major and not exceed it in minor.
func HeaderVersion() string {
	return fmt.Sprintf("%d.%d.%d", C.EMBER_VERSION_MAJOR, C.EMBER_VERSION_MINOR, C.EMBER_VERSION_PATCH)
}
