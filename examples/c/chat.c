/*
 * ember from C: submit one chat message, stream the answer with engine_poll, print the five timing metrics.
 *
 * Build: make c-examples      Run: make c-demo, or  target/c/chat "Your question"
 * The model comes from EMBER_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf (run from the project root).
 */
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints the failure of `call` and exits. */
static void die(const char *call, EmberStatus status) {
    fprintf(stderr, "%s failed: %s\n  %s\n", call, engine_status_message(status), engine_last_error_message());
    exit(1);
}

/* Writes `text` as a JSON string literal (quotes included) into `out`, which holds `cap` bytes. */
static int json_string(const char *text, char *out, size_t cap) {
    size_t n = 0;
    if (cap < 3) return -1;
    out[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        char escaped[8];
        if (*p == '"' || *p == '\\') {
            snprintf(escaped, sizeof escaped, "\\%c", *p);
        } else if (*p < 0x20) {
            snprintf(escaped, sizeof escaped, "\\u%04x", *p);
        } else {
            escaped[0] = (char)*p;
            escaped[1] = '\0';
        }
        size_t len = strlen(escaped);
        if (n + len + 2 > cap) return -1;
        memcpy(out + n, escaped, len);
        n += len;
    }
    out[n++] = '"';
    out[n] = '\0';
    return 0;
}

static void print_metric(const char *name, double value, uint32_t present, uint32_t bit, const char *unit) {
    if (present & bit) {
        printf("  %-24s %10.2f %s\n", name, value, unit);
    } else {
        printf("  %-24s %10s\n", name, "absent");
    }
}

int main(int argc, char **argv) {
    const char *message = argc > 1 ? argv[1] : "What is the boiling point of water in Celsius?";
    char content[2048];
    char request_json[4096];
    if (json_string(message, content, sizeof content) != 0) {
        fprintf(stderr, "the message is too long\n");
        return 1;
    }
    snprintf(request_json, sizeof request_json,
             "{\"messages\": [{\"role\": \"user\", \"content\": %s}], \"max_tokens\": 64, \"temperature\": 0}",
             content);

    /* NULL: the default configuration (all cores, the default model path). */
    EmberEngine *engine = NULL;
    EmberStatus status = engine_new(NULL, &engine);
    if (status != EMBER_STATUS_OK) die("engine_new", status);

    EmberRequest *request = NULL;
    status = engine_submit(engine, request_json, &request);
    if (status != EMBER_STATUS_OK) die("engine_submit", status);

    printf("> %s\n", message);
    EmberFinishReason reason = EMBER_FINISH_REASON_NONE;
    for (;;) {
        EmberEvent event;
        status = engine_poll(engine, request, -1, &event);
        /* After the final event (the last choice's FINISHED, or an ERROR) every poll answers STREAM_DONE. */
        if (status == EMBER_STATUS_STREAM_DONE) break;
        if (status != EMBER_STATUS_OK) die("engine_poll", status);
        switch (event.kind) {
        case EMBER_EVENT_KIND_DELTA:
            /* The text is valid until this thread's next poll of the request: write it out now. */
            fwrite(event.text, 1, event.text_len, stdout);
            fflush(stdout);
            break;
        case EMBER_EVENT_KIND_FINISHED:
            reason = event.finish_reason;
            break;
        case EMBER_EVENT_KIND_ERROR:
            fprintf(stderr, "\nthe request failed: %.*s\n", (int)event.text_len, event.text);
            return 1;
        }
    }
    printf("\n\n[finish reason: %s]\n", reason == EMBER_FINISH_REASON_STOP     ? "stop"
                                        : reason == EMBER_FINISH_REASON_LENGTH ? "length"
                                                                                : "other");

    /* struct_size tells the library which fields this program knows. */
    EmberPerRequestTimingMetrics metrics = {.struct_size = sizeof metrics};
    status = engine_get_timing_metrics(request, &metrics);
    if (status != EMBER_STATUS_OK) die("engine_get_timing_metrics", status);
    printf("per-request timing metrics:\n");
    print_metric("time_to_first_token_ms", metrics.time_to_first_token_ms, metrics.present,
                 EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS, "ms");
    print_metric("generation_time_ms", metrics.generation_time_ms, metrics.present, EMBER_TIMING_GENERATION_TIME_MS,
                 "ms");
    print_metric("queue_time_ms", metrics.queue_time_ms, metrics.present, EMBER_TIMING_QUEUE_TIME_MS, "ms");
    print_metric("mean_itl_ms", metrics.mean_itl_ms, metrics.present, EMBER_TIMING_MEAN_ITL_MS, "ms");
    print_metric("tokens_per_second", metrics.tokens_per_second, metrics.present, EMBER_TIMING_TOKENS_PER_SECOND,
                 "tokens/s");

    engine_request_free(request);
    engine_free(engine);
    return 0;
}
