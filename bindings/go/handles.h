/*
 * The C functions the Go package calls, with every handle passed as uintptr_t.
 *
 * Why: ember's handles are checked values, not addresses (docs/c_api.md, "Handles"): their bits encode a slot, a
 * type tag and a serial number. Go's garbage collector reads every pointer-typed value as an address, and may
 * abort the program ("found bad pointer in Go heap") when one falls inside its heap arena where no object lives.
 * So Go keeps handles as uintptr, and only these C wrappers turn them back into the pointer types of ember.h.
 * Strings and structs are real memory and pass through unchanged.
 */
#ifndef EMBER_GO_HANDLES_H
#define EMBER_GO_HANDLES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"

/* Defined in log_bridge.c: forwards a log line to the Go function registered under `userdata`. */
void ember_go_log_trampoline(void *userdata, EmberLogLevel level, const char *message);

/* Sets the log callback for the next engine_new: the trampoline with cgo handle `handle`, or none when 0. */
static inline EmberStatus ember_go_set_log(uintptr_t handle) {
    if (handle == 0) return engine_set_log_callback(NULL, NULL);
    return engine_set_log_callback(ember_go_log_trampoline, (void *)handle);
}

static inline EmberStatus ember_go_new(const char *config_json, uintptr_t *out) {
    EmberEngine *engine = NULL;
    EmberStatus status = engine_new(config_json, &engine);
    if (status == EMBER_STATUS_OK) *out = (uintptr_t)engine;
    return status;
}

/* Defined in log_bridge.c: forwards a load progress report to the Go function registered under `userdata`. */
bool ember_go_progress_trampoline(void *userdata, float progress);

/* engine_new_with_progress, reporting to the Go function with cgo handle `progress`. */
static inline EmberStatus ember_go_new_with_progress(const char *config_json, uintptr_t progress, uintptr_t *out) {
    EmberEngine *engine = NULL;
    EmberStatus status =
        engine_new_with_progress(config_json, ember_go_progress_trampoline, (void *)progress, &engine);
    if (status == EMBER_STATUS_OK) *out = (uintptr_t)engine;
    return status;
}

static inline void ember_go_free(uintptr_t engine) { engine_free((EmberEngine *)engine); }

static inline EmberStatus ember_go_stats(uintptr_t engine, EmberStats *out) {
    return engine_get_stats((const EmberEngine *)engine, out);
}

static inline EmberStatus ember_go_metrics_text(uintptr_t engine, char **out) {
    return engine_metrics_text((const EmberEngine *)engine, out);
}

static inline EmberStatus ember_go_tokenize(uintptr_t engine, const char *text, size_t text_len, bool add_special,
                                             bool parse_special, uint32_t *buffer, size_t capacity,
                                             size_t *out_count) {
    return engine_tokenize((const EmberEngine *)engine, text, text_len, add_special, parse_special, buffer, capacity,
                           out_count);
}

static inline EmberStatus ember_go_detokenize(uintptr_t engine, const uint32_t *ids, size_t n_ids,
                                               bool include_special, char **out) {
    return engine_detokenize((const EmberEngine *)engine, ids, n_ids, include_special, out);
}

static inline EmberStatus ember_go_token_bytes(uintptr_t engine, uint32_t id, uint8_t *buffer, size_t capacity,
                                               size_t *out_len) {
    return engine_token_bytes((const EmberEngine *)engine, id, buffer, capacity, out_len);
}

static inline EmberStatus ember_go_apply_chat_template(uintptr_t engine, const char *request_json, char **out) {
    return engine_apply_chat_template((const EmberEngine *)engine, request_json, out);
}

static inline EmberStatus ember_go_count_prompt_tokens(uintptr_t engine, uint32_t api, const char *request_json,
                                                       size_t *out_tokens) {
    return engine_count_prompt_tokens((const EmberEngine *)engine, api, request_json, out_tokens);
}

static inline EmberStatus ember_go_model_info(uintptr_t engine, char **out) {
    return engine_model_info_json((const EmberEngine *)engine, out);
}

static inline EmberStatus ember_go_embed(uintptr_t engine, const char *request_json, char **out) {
    return engine_embed((EmberEngine *)engine, request_json, out);
}

static inline EmberStatus ember_go_rerank(uintptr_t engine, const char *request_json, char **out) {
    return engine_rerank((EmberEngine *)engine, request_json, out);
}

static inline EmberStatus ember_go_submit_with_user_data(uintptr_t engine, const char *request_json,
                                                          uint64_t user_data, uint32_t delivery, uintptr_t *out) {
    EmberRequest *request = NULL;
    EmberStatus status =
        engine_submit_with_user_data((EmberEngine *)engine, request_json, user_data, delivery, &request);
    if (status == EMBER_STATUS_OK) *out = (uintptr_t)request;
    return status;
}

static inline EmberStatus ember_go_submit_api(uintptr_t engine, uint32_t api, const char *request_json,
                                              uint64_t user_data, uint32_t delivery, uintptr_t *out) {
    EmberRequest *request = NULL;
    EmberStatus status = engine_submit_api((EmberEngine *)engine, api, request_json, user_data, delivery, &request);
    if (status == EMBER_STATUS_OK) *out = (uintptr_t)request;
    return status;
}

/* The records live in C memory (the dispatcher's), so that Go never holds their `request` pointers: Go reads only
   the other fields. */
static inline EmberStatus ember_go_wait_events(uintptr_t engine, int32_t timeout_ms, EmberEventRecord *records,
                                                size_t capacity, size_t *out_count) {
    return engine_wait_events((EmberEngine *)engine, timeout_ms, records, capacity, out_count);
}

static inline EmberStatus ember_go_events_wakeup(uintptr_t engine) {
    return engine_events_wakeup((EmberEngine *)engine);
}

static inline EmberStatus ember_go_cancel(uintptr_t request) { return engine_cancel((EmberRequest *)request); }

static inline void ember_go_request_free(uintptr_t request) { engine_request_free((EmberRequest *)request); }

static inline EmberStatus ember_go_request_warnings_json(uintptr_t request, char **out) {
    return engine_request_warnings_json((const EmberRequest *)request, out);
}

static inline EmberStatus ember_go_response_json(uintptr_t request, char **out) {
    return engine_response_json((const EmberRequest *)request, out);
}

static inline EmberStatus ember_go_timing_metrics(uintptr_t request, uint32_t choice, EmberPerRequestTimingMetrics *out) {
    return engine_get_choice_timing_metrics((const EmberRequest *)request, choice, out);
}

static inline EmberStatus ember_go_extended_metrics(uintptr_t request, uint32_t choice, EmberExtendedTimingMetrics *out) {
    return engine_get_extended_metrics((const EmberRequest *)request, choice, out);
}

static inline EmberStatus ember_go_token_timestamps(uintptr_t request, uint32_t choice, double *buffer,
                                                     size_t capacity, size_t *out_count) {
    return engine_get_token_timestamps((const EmberRequest *)request, choice, buffer, capacity, out_count);
}

#endif /* EMBER_GO_HANDLES_H */
