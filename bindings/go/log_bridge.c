// The C side of the log and load progress callbacks: ember calls these with the userdata it was given, a
// cgo.Handle of the Go function (see log.go and progress.go). They live in a .c file because a Go file with
// //export may declare C functions in its preamble but not define them.
#include "_cgo_export.h"
#include "handles.h"

void ember_go_log_trampoline(void *userdata, EmberLogLevel level, const char *message) {
    // cgo exports take `char *`; the Go side only reads the message.
    emberGoLog((uintptr_t)userdata, (uint32_t)level, (char *)message);
}

bool ember_go_progress_trampoline(void *userdata, float progress) {
    return emberGoProgress((uintptr_t)userdata, progress);
}
