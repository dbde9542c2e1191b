package ember

// #include <stdint.h>
import "C"

import "runtime/cgo"

// LogLevel is the severity of one of the engine's log lines; lower is more severe.
type LogLevel uint32

// The levels of EmberLogLevel (include/ember.h); the numbers are ABI.
const (
	LogError LogLevel = 1
	LogWarn  LogLevel = 2
	LogInfo  LogLevel = 3
	LogDebug LogLevel = 4
)

// String names the level as log lines usually do.
func (l LogLevel) String() string {
	switch l {
	case LogError:
		return "error"
	case LogWarn:
		return "warn"
	case LogInfo:
		return "info"
	case LogDebug:
		return "debug"
	}
	return "unknown"
}

// LogFunc receives one log line of an engine. ember may call it from any thread, from several at once, and
// from the engine's own thread: it must be safe for concurrent use, return promptly and not call this package
// (the C API forbids calling ember from inside the callback).
type LogFunc func(level LogLevel, message string)

// emberGoLog is the exported end of log_bridge.c's trampoline: `handle` is the cgo.Handle of the engine's
// LogFunc, registered by NewEngine and deleted by (*Engine).Close after engine_free has joined every thread
// that could log.
//
//export emberGoLog
func emberGoLog(handle C.uintptr_t, level C.uint32_t, message *C.char) {
	log := cgo.Handle(handle).Value().(LogFunc)
	log(LogLevel(level), C.GoString(message))
}
