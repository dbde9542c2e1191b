// The C side of the log callback: ember calls this with the userdata given to engine_set_log_callback, which
// is a cgo.Handle of the engine's Go log function (see log.go). It lives in a .c file because a Go file with
// //export may declare C functions in its preamble but not define them.
#include "_cgo_export.h"
#include "handles.h"

void ember_go_log_trampoline(void *userdata, EngineLogLevel level, const char *message) {
    // cgo exports take `char *`; the Go side only reads the message.
    emberGoLog((uintptr_t)userdata, (uint32_t)level, (char *)message);
}
