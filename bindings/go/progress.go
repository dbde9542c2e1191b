package ember

// #include <stdbool.h>
// #include <stdint.h>
import "C"

import "runtime/cgo"

// LoadProgressFunc receives the fraction of the model loaded, from 0 to 1, never decreasing (1 exactly once,
// last), and returns false to cancel the load: NewEngine then fails with StatusLoadCancelled. It is called on
// NewEngine's goroutine, during NewEngine only (engine_new_with_progress).
type LoadProgressFunc func(fraction float32) bool

// progressCall is what the C trampoline reaches: the host's function, and a panic it raised (re-raised by
// NewEngine once the C call has returned: a Go panic must not unwind through C frames).
type progressCall struct {
	report   LoadProgressFunc
	panicked any
}

// emberGoProgress is the exported end of log_bridge.c's progress trampoline: `handle` is the cgo.Handle of a
// *progressCall registered by NewEngine for the duration of its engine_new_with_progress call.
//
//export emberGoProgress
func emberGoProgress(handle C.uintptr_t, fraction C.float) (goOn C.bool) {
	call := cgo.Handle(handle).Value().(*progressCall)
	if call.panicked != nil {
		return false
	}
	defer func() {
		if p := recover(); p != nil {
			call.panicked, goOn = p, false
		}
	}()
	return C.bool(call.report(float32(fraction)))
}
