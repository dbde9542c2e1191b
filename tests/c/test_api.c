/*
 * The C API as a host uses it, and misuses it: every function of include/ember.h, NULL pointers everywhere,
 * freed, stale and foreign handles, invalid JSON and UTF-8, double frees, concurrent polls of one request, a
 * request freed while another thread polls it, an engine freed while its requests are polled, struct_size
 * smaller than the struct, polls after a request's final event (STREAM_DONE at once, repeatedly), a parent's
 * handles used in a forked child. Run under AddressSanitizer against the shared and the static library, and
 * under valgrind against the shared one (see c.mk): any memory error, leak or crash fails the run, and so does
 * any CHECK.
 *
 * Usage: test_api [THREADS] [--short [PART]]
 *   THREADS  engine threads (default 1); the model comes from EMBER_MODEL or the default path.
 *   --short  one- or two-token prompts and completions only: under valgrind each token of the real model costs
 *            seconds, so the valgrind run skips the chat template's ~35-token default system prompt (the ASan
 *            run covers it).
 *   PART     1 or 2: only that half of the tests (valgrind runs one thread at a time, so c.mk runs the two
 *            halves as two processes, one per core); without it, all of them.
 * Plain C11 + pthreads. Requests are greedy with small max_tokens, so results are deterministic.
 */
#include "ember.h"
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Whether this thread's last error message contains `needle`. */
static int last_error_has(const char *needle) { return strstr(engine_last_error_message(), needle) != NULL; }

/* The last error names the function that failed, not a function it shares code with. */
static int last_error_names(const char *function) {
    const char *message = engine_last_error_message();
    size_t n = strlen(function);
    return strncmp(message, function, n) == 0 && message[n] == ':';
}

#define CHECK_FAILS_AS(call, expected, function)                                                                     \
    do {                                                                                                             \
        CHECK_STATUS(call, expected);                                                                                \
        CHECK(last_error_names(function));                                                                           \
    } while (0)

static char engine_config[128];

static EmberEngine *new_engine(void) {
    EmberEngine *engine = NULL;
    CHECK_STATUS(engine_new(engine_config, &engine), EMBER_STATUS_OK);
    CHECK(engine != NULL);
    return engine;
}

static EmberRequest *submit(EmberEngine *engine, const char *json) {
    EmberRequest *request = NULL;
    CHECK_STATUS(engine_submit(engine, json, &request), EMBER_STATUS_OK);
    CHECK(request != NULL);
    return request;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* After its final event, every poll of a request answers STREAM_DONE at once, whatever the timeout, and leaves
   the event untouched. */
static void check_stream_done(EmberEngine *engine, EmberRequest *request) {
    const int32_t timeouts[] = {-1, 0, 5000, -1};
    for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++) {
        EmberEvent ev, untouched;
        memset(&ev, 0x5A, sizeof ev);
        memcpy(&untouched, &ev, sizeof ev);
        double start = now_ms();
        CHECK_STATUS(engine_poll(engine, request, timeouts[i], &ev), EMBER_STATUS_STREAM_DONE);
        CHECK(now_ms() - start < 2500); /* did not wait for the 5000 ms */
        CHECK(memcmp(&ev, &untouched, sizeof ev) == 0);
        CHECK(last_error_has("engine_poll: the final event has been returned"));
    }
}

/* What draining a single-choice request by engine_poll produced. */
typedef struct {
    char text[4096];
    size_t text_len;
    uint32_t tokens;
    uint32_t deltas;
    EmberFinishReason reason;
} Drained;

static void drain(EmberEngine *engine, EmberRequest *request, Drained *d) {
    memset(d, 0, sizeof *d);
    for (;;) {
        EmberEvent ev;
        CHECK_STATUS(engine_poll(engine, request, -1, &ev), EMBER_STATUS_OK);
        if (ev.kind == EMBER_EVENT_KIND_FINISHED) {
            CHECK(ev.text == NULL && ev.text_len == 0 && ev.choice == 0);
            d->reason = ev.finish_reason;
            /* The one choice's FINISHED is the final event: the stream is over. */
            CHECK_STATUS(engine_poll(engine, request, -1, &ev), EMBER_STATUS_STREAM_DONE);
            return;
        }
        CHECK(ev.kind == EMBER_EVENT_KIND_DELTA);
        CHECK(ev.finish_reason == EMBER_FINISH_REASON_NONE && ev.choice == 0);
        CHECK(ev.text != NULL && ev.text[ev.text_len] == '\0');
        CHECK(d->text_len + ev.text_len < sizeof d->text);
        memcpy(d->text + d->text_len, ev.text, ev.text_len);
        d->text_len += ev.text_len;
        d->tokens += ev.num_tokens;
        d->deltas++;
    }
}

/* ---------------------------------------------------------------------------------------------------------- */

static int log_lines = 0;

static void count_log_line(void *userdata, EmberLogLevel level, const char *message) {
    int *lines = userdata;
    __atomic_add_fetch(lines, 1, __ATOMIC_RELAXED);
    /* Show which kernels the engine chose (valgrind's CPU has no AVX-512: expect avx2 there). */
    if (level <= EMBER_LOG_LEVEL_INFO && strstr(message, "engine started") != NULL) {
        fprintf(stderr, "  [ember log] %s\n", message);
    }
}

static void test_static_functions(void) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", EMBER_VERSION_MAJOR, EMBER_VERSION_MINOR, EMBER_VERSION_PATCH);
    CHECK(strcmp(engine_version(), expected) == 0);
    CHECK(strcmp(engine_last_error_message(), "") == 0);
    for (uint32_t s = EMBER_STATUS_OK; s <= EMBER_STATUS_LOAD_CANCELLED; s++) {
        CHECK(engine_status_message(s) != NULL && strlen(engine_status_message(s)) > 0);
        CHECK(strcmp(engine_status_message(s), "unknown status") != 0);
    }
    CHECK(strcmp(engine_status_message(EMBER_STATUS_LOAD_CANCELLED + 1), "unknown status") == 0);
    CHECK(strcmp(engine_status_message(UINT32_MAX), "unknown status") == 0);
}

static void test_null_arguments(void) {
    EmberEngine *engine = (EmberEngine *)0x1;
    EmberRequest *request = (EmberRequest *)0x1;
    EmberEvent ev;
    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    EmberExtendedTimingMetrics x = {.struct_size = sizeof x};
    size_t count = 7;
    char *json = NULL;

    CHECK_FAILS_AS(engine_new(NULL, NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_new");
    CHECK(last_error_has("engine_new: out is NULL"));
    CHECK_FAILS_AS(engine_submit(NULL, "{}", &request), EMBER_STATUS_INVALID_ARGUMENT, "engine_submit");
    CHECK(request == (EmberRequest *)0x1);
    CHECK_FAILS_AS(engine_submit(NULL, NULL, &request), EMBER_STATUS_INVALID_ARGUMENT, "engine_submit");
    CHECK_FAILS_AS(engine_submit(NULL, "{}", NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_submit");
    CHECK_FAILS_AS(engine_poll(NULL, NULL, 0, &ev), EMBER_STATUS_INVALID_ARGUMENT, "engine_poll");
    CHECK_FAILS_AS(engine_poll(NULL, NULL, 0, NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_poll");
    CHECK_FAILS_AS(engine_cancel(NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_cancel");
    CHECK_FAILS_AS(engine_get_timing_metrics(NULL, &m), EMBER_STATUS_INVALID_ARGUMENT, "engine_get_timing_metrics");
    CHECK_FAILS_AS(engine_get_timing_metrics(NULL, NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_get_timing_metrics");
    CHECK_FAILS_AS(engine_get_choice_timing_metrics(NULL, 0, &m),
                   EMBER_STATUS_INVALID_ARGUMENT, "engine_get_choice_timing_metrics");
    CHECK_FAILS_AS(engine_get_extended_metrics(NULL, 0, &x),
                   EMBER_STATUS_INVALID_ARGUMENT, "engine_get_extended_metrics");
    CHECK_FAILS_AS(engine_get_extended_metrics(NULL, 0, NULL),
                   EMBER_STATUS_INVALID_ARGUMENT, "engine_get_extended_metrics");
    CHECK_FAILS_AS(engine_get_token_timestamps(NULL, 0, NULL, 0, &count),
                   EMBER_STATUS_INVALID_ARGUMENT, "engine_get_token_timestamps");
    CHECK_FAILS_AS(engine_get_token_timestamps(NULL, 0, NULL, 0, NULL),
                   EMBER_STATUS_INVALID_ARGUMENT, "engine_get_token_timestamps");
    CHECK(count == 7);
    EmberStats stats = {.struct_size = sizeof stats};
    CHECK_FAILS_AS(engine_get_stats(NULL, &stats), EMBER_STATUS_INVALID_ARGUMENT, "engine_get_stats");
    CHECK_FAILS_AS(engine_get_stats(NULL, NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_get_stats");
    stats.struct_size = 4;
    CHECK_FAILS_AS(engine_get_stats((EmberEngine *)0x12345678, &stats), EMBER_STATUS_INVALID_ARGUMENT, "engine_get_stats");
    CHECK_FAILS_AS(engine_response_json(NULL, &json), EMBER_STATUS_INVALID_ARGUMENT, "engine_response_json");
    CHECK_FAILS_AS(engine_response_json(NULL, NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_response_json");
    CHECK_FAILS_AS(engine_next_chunk_json(NULL, NULL, 0, &json),
                   EMBER_STATUS_INVALID_ARGUMENT, "engine_next_chunk_json");
    CHECK(json == NULL);
    CHECK_STATUS(engine_set_log_callback(NULL, NULL), EMBER_STATUS_OK);
    /* The frees take NULL as a no-op, and succeed: the last error is cleared. */
    engine_free(NULL);
    engine_request_free(NULL);
    engine_string_free(NULL);
    CHECK(strcmp(engine_last_error_message(), "") == 0);
    CHECK(engine == (EmberEngine *)0x1);
}

static void test_bad_configurations(void) {
    EmberEngine *engine = (EmberEngine *)0x1;
    CHECK_STATUS(engine_new("{not json", &engine), EMBER_STATUS_INVALID_CONFIG);
    CHECK_STATUS(engine_new("{\"max_num_seq\": 4}", &engine), EMBER_STATUS_INVALID_CONFIG);
    CHECK(last_error_has("unknown configuration key \"max_num_seq\""));
    /* Valid JSON that is not an object is no configuration. */
    const char *not_objects[] = {"[]", "null", "3", "\"threads\"", "true"};
    for (size_t i = 0; i < sizeof not_objects / sizeof not_objects[0]; i++) {
        CHECK_STATUS(engine_new(not_objects[i], &engine), EMBER_STATUS_INVALID_CONFIG);
        CHECK(last_error_has("must be a JSON object"));
    }
    /* A wrong type names its key. */
    CHECK_STATUS(engine_new("{\"seed\": \"x\"}", &engine), EMBER_STATUS_INVALID_CONFIG);
    CHECK(last_error_has("engine_new: seed: invalid type: string \"x\", expected a non-negative integer"));
    CHECK_STATUS(engine_new("{\"backend\": 1}", &engine), EMBER_STATUS_INVALID_CONFIG);
    CHECK(last_error_has("engine_new: backend: "));
    CHECK_STATUS(engine_new("{\"enable_per_request_metrics\": true, \"disable_log_stats\": true}", &engine),
                 EMBER_STATUS_INVALID_CONFIG);
    CHECK(last_error_has("disable_log_stats"));
    CHECK_STATUS(engine_new("{\"threads\": -1}", &engine), EMBER_STATUS_INVALID_CONFIG);
    CHECK_STATUS(engine_new("{\"model\": \"\xff\xfe\"}", &engine), EMBER_STATUS_INVALID_UTF8);
    CHECK_STATUS(engine_new("{\"model\": \"/nonexistent/model.gguf\"}", &engine), EMBER_STATUS_MODEL_LOAD_FAILED);
    CHECK(last_error_has("/nonexistent/model.gguf") && last_error_has("not found"));
    /* Paths that exist but are no regular file say so, not "not found". */
    CHECK_STATUS(engine_new("{\"model\": \"/tmp\"}", &engine), EMBER_STATUS_MODEL_LOAD_FAILED);
    CHECK(last_error_has("is a directory, not a regular file") && !last_error_has("not found"));
    CHECK_STATUS(engine_new("{\"model\": \"/dev/null\"}", &engine), EMBER_STATUS_MODEL_LOAD_FAILED);
    CHECK(last_error_has("exists but is not a regular file") && !last_error_has("not found"));
    CHECK(engine == (EmberEngine *)0x1); /* never written on failure */
}

static void test_invalid_requests(EmberEngine *engine) {
    EmberRequest *request = (EmberRequest *)0x1;
    CHECK_STATUS(engine_submit(engine, "{\"messages\": [", &request), EMBER_STATUS_INVALID_REQUEST);
    CHECK(last_error_has("\"error\"") && last_error_has("\"invalid_request_error\""));
    CHECK_STATUS(engine_submit(engine, "{}", &request), EMBER_STATUS_INVALID_REQUEST);
    CHECK_STATUS(engine_submit(engine, "{\"prompt\": \"a\", \"messages\": []}", &request),
                 EMBER_STATUS_INVALID_REQUEST);
    CHECK_STATUS(engine_submit(engine, "{\"prompt\": \"hi\", \"temperature\": 7}", &request),
                 EMBER_STATUS_INVALID_REQUEST);
    CHECK(last_error_has("\"param\":\"temperature\""));
    CHECK_STATUS(engine_submit(engine, "{\"prompt\": \"\xc3\x28\"}", &request), EMBER_STATUS_INVALID_UTF8);
    CHECK(last_error_has("request_json is not valid UTF-8"));
    CHECK(request == (EmberRequest *)0x1);
}

/* The requests the tests submit: a greedy reference request (several deltas), a stream, a long request (it ignores
 * end-of-generation tokens, so that it is certainly still running when a test frees it or its engine; its prompt
 * makes the model count, so that text, and with it the first event, comes at once: with end-of-generation tokens
 * ignored, a model may also go on emitting control tokens, which have no text). */
typedef struct {
    const char *reference;
    const char *reference_object; /* the "object" of its response */
    const char *stream;
    const char *long_running;
    const char *chat_logprobs; /* a chat request with logprobs and top_logprobs */
    const char *speculative;   /* a repetitive completion for n-gram drafts; %s: the opt-out field, or nothing */
} Requests;

static const Requests FULL_REQUESTS = {
    .reference = "{\"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}],"
                 " \"max_tokens\": 6, \"temperature\": 0}",
    .reference_object = "\"object\":\"chat.completion\"",
    .stream = "{\"prompt\": \"The sky is\", \"max_tokens\": 4, \"temperature\": 0, \"stream\": true,"
              " \"stream_options\": {\"include_usage\": true}}",
    .long_running = "{\"prompt\": \"Count: 1, 2, 3,\", \"max_tokens\": 400, \"temperature\": 0,"
                    " \"ignore_eos\": true}",
    .chat_logprobs = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 3,"
                     " \"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 2}",
    .speculative = "{\"prompt\": \"one two three four, one two three four, one two three four, one two\","
                   " \"max_tokens\": 12, \"temperature\": 0%s}",
};

/* Under valgrind every prompt position costs a second or more: the chat request brings its own short system
   message (the template's default one is some 30 tokens), the repetitive prompt is shorter. */
static const Requests SHORT_REQUESTS = {
    .reference = "{\"prompt\": \"Hi\", \"max_tokens\": 3, \"temperature\": 0}",
    .reference_object = "\"object\":\"text_completion\"",
    .stream = "{\"prompt\": \"Hi\", \"max_tokens\": 1, \"temperature\": 0, \"stream\": true,"
              " \"stream_options\": {\"include_usage\": true}}",
    .long_running = "{\"prompt\": \"Count: 1, 2, 3,\", \"max_tokens\": 400, \"temperature\": 0,"
                    " \"ignore_eos\": true}",
    .chat_logprobs = "{\"messages\": [{\"role\": \"system\", \"content\": \"Hi\"}, {\"role\": \"user\","
                     " \"content\": \"Hi\"}], \"max_tokens\": 2, \"temperature\": 0, \"logprobs\": true,"
                     " \"top_logprobs\": 2}",
    .speculative = "{\"prompt\": \"1, 2, 3, 1, 2, 3, 1,\", \"max_tokens\": 4, \"temperature\": 0%s}",
};

static const Requests *requests = &FULL_REQUESTS;

/* One request end to end: poll, metrics (full, short and too-short struct_size), token timestamps, response. */
static void test_generation_and_metrics(EmberEngine *engine, Drained *reference) {
    EmberRequest *request = submit(engine, requests->reference);
    EmberEvent ev;
    char *json = (char *)0x1;
    CHECK_STATUS(engine_poll(engine, request, -2, &ev), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_poll(engine, request, INT32_MIN, &ev), EMBER_STATUS_INVALID_ARGUMENT);
    EmberStatus early = engine_response_json(request, &json);
    /* The prefill takes milliseconds at least: the request cannot have finished yet. */
    CHECK_STATUS(early, EMBER_STATUS_NOT_FINISHED);
    CHECK(json == (char *)0x1);

    drain(engine, request, reference);
    CHECK(reference->text_len > 0 && reference->tokens > 0 && reference->tokens <= 6);
    CHECK(reference->reason == EMBER_FINISH_REASON_LENGTH || reference->reason == EMBER_FINISH_REASON_STOP);
    printf("  generated %u tokens in %u deltas: \"%.*s\"\n", reference->tokens, reference->deltas,
           (int)reference->text_len, reference->text);
    check_stream_done(engine, request);

    EmberPerRequestTimingMetrics m;
    memset(&m, 0xAB, sizeof m);
    m.struct_size = sizeof m;
    CHECK_STATUS(engine_get_timing_metrics(request, &m), EMBER_STATUS_OK);
    CHECK(m.struct_size == sizeof m);
    uint32_t always = EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS | EMBER_TIMING_GENERATION_TIME_MS |
                      EMBER_TIMING_QUEUE_TIME_MS | EMBER_TIMING_TOKENS_PER_SECOND;
    CHECK((m.present & always) == always);
    CHECK(m.time_to_first_token_ms > 0 && m.queue_time_ms >= 0 && m.generation_time_ms >= 0);
    CHECK(m.tokens_per_second > 0);
    CHECK(reference->tokens < 2 ? isnan(m.mean_itl_ms) : m.mean_itl_ms > 0);

    /* struct_size from an older, shorter header: only the fields within it are written. */
    EmberPerRequestTimingMetrics old;
    memset(&old, 0xAB, sizeof old);
    old.struct_size = offsetof(EmberPerRequestTimingMetrics, queue_time_ms);
    CHECK_STATUS(engine_get_timing_metrics(request, &old), EMBER_STATUS_OK);
    CHECK(old.time_to_first_token_ms == m.time_to_first_token_ms);
    CHECK(old.present == (m.present & (EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS | EMBER_TIMING_GENERATION_TIME_MS)));
    const unsigned char *tail = (const unsigned char *)&old + offsetof(EmberPerRequestTimingMetrics, queue_time_ms);
    for (size_t i = 0; i < sizeof old - offsetof(EmberPerRequestTimingMetrics, queue_time_ms); i++) CHECK(tail[i] == 0xAB);
    old.struct_size = 4;
    CHECK_STATUS(engine_get_timing_metrics(request, &old), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK(last_error_has("struct_size"));

    EmberExtendedTimingMetrics x;
    memset(&x, 0, sizeof x);
    x.struct_size = sizeof x;
    CHECK_STATUS(engine_get_extended_metrics(request, 0, &x), EMBER_STATUS_OK);
    CHECK(x.present & EMBER_EXTENDED_E2E_LATENCY_MS);
    CHECK(x.e2e_latency_ms >= x.ttft_from_arrival_ms && x.ttft_from_arrival_ms > 0);
    CHECK((x.present & EMBER_EXTENDED_NUM_PROMPT_TOKENS) && x.num_prompt_tokens > 0);
    CHECK((x.present & EMBER_EXTENDED_NUM_PREEMPTIONS) && x.num_preemptions == 0);
    CHECK_STATUS(engine_get_extended_metrics(request, 1, &x), EMBER_STATUS_CHOICE_OUT_OF_RANGE);
    CHECK_STATUS(engine_get_choice_timing_metrics(request, 1, &m), EMBER_STATUS_CHOICE_OUT_OF_RANGE);

    /* Token timestamps: a size query, a short buffer (untouched), then the copy. */
    size_t needed = 0;
    CHECK_STATUS(engine_get_token_timestamps(request, 0, NULL, 0, &needed), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK(needed >= reference->tokens && needed <= 6);
    double times[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    size_t count = 0;
    CHECK_STATUS(engine_get_token_timestamps(request, 0, times, needed - 1, &count), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK(count == needed && times[0] == -1);
    CHECK_STATUS(engine_get_token_timestamps(request, 0, NULL, 3, &count), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_get_token_timestamps(request, 0, times, 8, &count), EMBER_STATUS_OK);
    CHECK(count == needed && times[count] == -1);
    for (size_t i = 1; i < count; i++) CHECK(times[i] >= times[i - 1]);
    CHECK(fabs(times[0] - x.ttft_from_arrival_ms) < 1e-6);

    CHECK_STATUS(engine_response_json(request, &json), EMBER_STATUS_OK);
    CHECK(strstr(json, requests->reference_object) != NULL && strstr(json, "\"usage\"") != NULL);
    engine_string_free(json);
    CHECK(strcmp(engine_last_error_message(), "") == 0);
    engine_string_free(json); /* double free: harmless, reported */
    CHECK(last_error_has("engine_string_free"));
    char *foreign = strdup("not ember's");
    engine_string_free(foreign); /* not ours: left alone */
    CHECK(last_error_has("not a string from ember"));
    CHECK(strcmp(foreign, "not ember's") == 0);
    free(foreign);

    engine_request_free(request);
    CHECK(strcmp(engine_last_error_message(), "") == 0);
    /* Everything refuses the freed handle; a second free is harmless and reported. */
    CHECK_STATUS(engine_poll(engine, request, 0, &ev), EMBER_STATUS_INVALID_HANDLE);
    CHECK_STATUS(engine_get_timing_metrics(request, &m), EMBER_STATUS_INVALID_HANDLE);
    CHECK_STATUS(engine_response_json(request, &json), EMBER_STATUS_INVALID_HANDLE);
    CHECK_STATUS(engine_cancel(request), EMBER_STATUS_INVALID_HANDLE);
    engine_request_free(request);
    CHECK(last_error_has("engine_request_free") && last_error_has("not a live request handle"));
}

/* A cancelled request ends with CANCELLED, one FINISHED per choice, then STREAM_DONE; it still has a response;
   n = 2 choices have their own metrics. */
static void test_cancel_and_choices(EmberEngine *engine) {
    EmberRequest *request = submit(engine, "{\"prompt\": \"Hi\", \"max_tokens\": 200, \"n\": 2,"
                                            " \"temperature\": 0}");
    CHECK_STATUS(engine_cancel(request), EMBER_STATUS_OK);
    CHECK_STATUS(engine_cancel(request), EMBER_STATUS_OK); /* idempotent */
    int finished[2] = {0, 0};
    EmberStatus status;
    EmberEvent ev;
    while ((status = engine_poll(engine, request, -1, &ev)) == EMBER_STATUS_OK) {
        CHECK(ev.kind != EMBER_EVENT_KIND_ERROR && ev.choice < 2);
        if (ev.kind == EMBER_EVENT_KIND_FINISHED) {
            CHECK(ev.finish_reason == EMBER_FINISH_REASON_CANCELLED);
            finished[ev.choice]++;
        }
    }
    CHECK_STATUS(status, EMBER_STATUS_STREAM_DONE);
    CHECK(finished[0] == 1 && finished[1] == 1);
    check_stream_done(engine, request);
    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    CHECK_STATUS(engine_get_choice_timing_metrics(request, 1, &m), EMBER_STATUS_OK);
    CHECK_STATUS(engine_get_choice_timing_metrics(request, 2, &m), EMBER_STATUS_CHOICE_OUT_OF_RANGE);
    char *json = NULL;
    CHECK_STATUS(engine_response_json(request, &json), EMBER_STATUS_OK);
    CHECK(strstr(json, "\"finish_reason\":\"cancelled\"") != NULL);
    engine_string_free(json);
    engine_request_free(request);

    /* The cancelled choices have left the engine: nothing runs or waits, every KV block is free. */
    EmberStats stats = {.struct_size = sizeof stats};
    CHECK_STATUS(engine_get_stats(engine, &stats), EMBER_STATUS_OK);
    const uint32_t window_bits = EMBER_STATS_KV_WINDOW_BLOCKS_FREE | EMBER_STATS_KV_WINDOW_BLOCKS_TOTAL;
    const uint32_t prefix_bits =
        EMBER_STATS_PREFIX_CACHE_BLOCKS | EMBER_STATS_PREFIX_CACHE_QUERIES | EMBER_STATS_PREFIX_CACHE_HITS;
    CHECK((stats.present & ~(window_bits | prefix_bits)) ==
          (EMBER_STATS_NUM_RUNNING | EMBER_STATS_NUM_WAITING | EMBER_STATS_KV_BLOCKS_FREE |
           EMBER_STATS_KV_BLOCKS_TOTAL | EMBER_STATS_NUM_STEPS | EMBER_STATS_CPU_KERNELS |
           EMBER_STATS_CPU_THREADS | EMBER_STATS_NUM_PREEMPTIONS | EMBER_STATS_MODEL_LOAD_TIME_MS));
    /* A model with sliding-window layers (Gemma 3) keeps them in a block pool of their own: free again too. Such
       a model has no prefix cache (a cached prefix needs every layer's KV); any other has one by default. */
    const char *model = getenv("EMBER_MODEL");
    const int windowed = model != NULL && strstr(model, "gemma") != NULL;
    CHECK((stats.present & window_bits) == (windowed ? window_bits : 0));
    CHECK((stats.present & prefix_bits) == (windowed ? 0 : prefix_bits));
    if (windowed) {
        CHECK(stats.kv_window_blocks_total > 0 && stats.kv_window_blocks_free == stats.kv_window_blocks_total);
    } else {
        CHECK(stats.prefix_cache_hits <= stats.prefix_cache_queries);
        CHECK(stats.prefix_cache_blocks <= stats.kv_blocks_total);
    }
    CHECK(stats.num_running == 0 && stats.num_waiting == 0);
    /* The CPU backend serves this engine: a known kernel path, and its threads. */
    CHECK(stats.cpu_kernels == EMBER_CPU_KERNELS_SCALAR || stats.cpu_kernels == EMBER_CPU_KERNELS_AVX2 ||
          stats.cpu_kernels == EMBER_CPU_KERNELS_AVX512 || stats.cpu_kernels == EMBER_CPU_KERNELS_AMX);
    CHECK(stats.cpu_threads >= 1);
    CHECK(stats.kv_blocks_total > 0 && stats.kv_blocks_free == stats.kv_blocks_total);
    /* A caller that knows only the first two counters gets just those. */
    EmberStats small = {.struct_size = 16, .kv_blocks_free = 12345};
    CHECK_STATUS(engine_get_stats(engine, &small), EMBER_STATUS_OK);
    CHECK(small.present == (EMBER_STATS_NUM_RUNNING | EMBER_STATS_NUM_WAITING) && small.kv_blocks_free == 12345);
}

/* A streaming completion read chunk by chunk, to STREAM_DONE. */
static void test_stream_chunks(EmberEngine *engine) {
    EmberRequest *request = submit(engine, requests->stream);
    char *chunk = NULL;
    CHECK_STATUS(engine_next_chunk_json(engine, request, -3, &chunk), EMBER_STATUS_INVALID_ARGUMENT);
    int chunks = 0, usage_seen = 0;
    EmberStatus first = engine_next_chunk_json(engine, request, 0, &chunk); /* see test_free_while_polling */
    CHECK(first == EMBER_STATUS_TIMEOUT || first == EMBER_STATUS_OK);
    if (first == EMBER_STATUS_OK) {
        chunks++;
        engine_string_free(chunk);
    }
    for (;;) {
        EmberStatus status = engine_next_chunk_json(engine, request, -1, &chunk);
        if (status == EMBER_STATUS_STREAM_DONE) break;
        CHECK_STATUS(status, EMBER_STATUS_OK);
        CHECK(strstr(chunk, "\"object\":\"text_completion\"") != NULL);
        usage_seen |= strstr(chunk, "\"prompt_tokens\"") != NULL;
        chunks++;
        engine_string_free(chunk);
    }
    CHECK(chunks >= 2 && usage_seen);
    CHECK_STATUS(engine_next_chunk_json(engine, request, 0, &chunk), EMBER_STATUS_STREAM_DONE);
    engine_request_free(request);
}

/* Log probabilities reach the host in the response JSON, in the shape of each endpoint. */
static void test_logprobs_json(EmberEngine *engine) {
    EmberRequest *request = submit(engine, requests->chat_logprobs);
    Drained d;
    drain(engine, request, &d);
    char *json = NULL;
    CHECK_STATUS(engine_response_json(request, &json), EMBER_STATUS_OK);
    CHECK(strstr(json, "\"logprobs\":{\"content\":[{\"token\":") != NULL);
    CHECK(strstr(json, "\"top_logprobs\":[{\"token\":") != NULL && strstr(json, "\"bytes\":[") != NULL);
    engine_string_free(json);
    /* The sampled tokens' numbers through the getter: a size query, a short buffer (untouched), the copy. */
    size_t needed = 0;
    CHECK_STATUS(engine_get_token_logprobs(request, 0, NULL, 0, &needed), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK(needed >= 1 && needed <= 3);
    EmberTokenLogprob lps[4] = {{0, 1.0f}, {0, 1.0f}, {0, 1.0f}, {0, 1.0f}};
    size_t count = 0;
    CHECK_STATUS(engine_get_token_logprobs(request, 0, lps, needed - 1, &count), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK(count == needed && lps[0].logprob == 1.0f);
    CHECK_STATUS(engine_get_token_logprobs(request, 0, NULL, 2, &count), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_get_token_logprobs(request, 0, lps, 4, NULL), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_get_token_logprobs(request, 1, lps, 4, &count), EMBER_STATUS_CHOICE_OUT_OF_RANGE);
    CHECK_STATUS(engine_get_token_logprobs(request, 0, lps, 4, &count), EMBER_STATUS_OK);
    CHECK(count == needed && lps[count].logprob == 1.0f);
    for (size_t i = 0; i < count; i++) CHECK(lps[i].logprob <= 0.0f && lps[i].logprob > -9999.0f);
    engine_request_free(request);
    CHECK_STATUS(engine_get_token_logprobs(request, 0, lps, 4, &count), EMBER_STATUS_INVALID_HANDLE);

    request = submit(engine, "{\"prompt\": \"The sky is\", \"max_tokens\": 3, \"temperature\": 0, \"logprobs\": 1}");
    drain(engine, request, &d);
    CHECK_STATUS(engine_get_token_logprobs(request, 0, NULL, 0, &needed), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK_STATUS(engine_response_json(request, &json), EMBER_STATUS_OK);
    CHECK(strstr(json, "\"token_logprobs\":[-") != NULL && strstr(json, "\"text_offset\":[0") != NULL);
    engine_string_free(json);
    engine_request_free(request);

    request = (EmberRequest *)0x1;
    CHECK_STATUS(engine_submit(engine, "{\"prompt\": \"a\", \"logprobs\": 21}", &request),
                 EMBER_STATUS_INVALID_REQUEST);
    CHECK(last_error_has("\"param\":\"logprobs\"") && request == (EmberRequest *)0x1);
}

/* Handles that are not what they claim: random values, the other type, another engine's request. */
static void test_handle_misuse(EmberEngine *engine, EmberEngine *other) {
    EmberEvent ev;
    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    char *json = NULL;
    int on_stack = 42;
    EmberRequest *random_values[] = {(EmberRequest *)(uintptr_t)0xdeadbeef, (EmberRequest *)(void *)&on_stack,
                                      (EmberRequest *)(uintptr_t)UINTPTR_MAX, (EmberRequest *)(void *)engine};
    for (size_t i = 0; i < sizeof random_values / sizeof random_values[0]; i++) {
        CHECK_STATUS(engine_poll(engine, random_values[i], 0, &ev), EMBER_STATUS_INVALID_HANDLE);
        CHECK_STATUS(engine_get_timing_metrics(random_values[i], &m), EMBER_STATUS_INVALID_HANDLE);
        CHECK_STATUS(engine_cancel(random_values[i]), EMBER_STATUS_INVALID_HANDLE);
        if ((void *)random_values[i] != (void *)engine) {
            EmberStats stats = {.struct_size = sizeof stats};
            CHECK_STATUS(engine_get_stats((const EmberEngine *)(const void *)random_values[i], &stats),
                         EMBER_STATUS_INVALID_HANDLE);
        }
        engine_request_free(random_values[i]);
        CHECK(last_error_has("engine_request_free"));
    }
    CHECK(last_error_has("an engine handle was passed where a request handle is expected"));
    CHECK(on_stack == 42);
    engine_free((EmberEngine *)(void *)&on_stack);
    CHECK(last_error_has("engine_free") && on_stack == 42);
    CHECK_STATUS(engine_submit((EmberEngine *)(uintptr_t)0x1234, requests->reference, &(EmberRequest *){NULL}),
                 EMBER_STATUS_INVALID_HANDLE);

    EmberRequest *request = submit(engine, "{\"prompt\": \"Hi\", \"max_tokens\": 1, \"temperature\": 0}");
    CHECK_STATUS(engine_submit((EmberEngine *)(void *)request, requests->reference, &(EmberRequest *){NULL}),
                 EMBER_STATUS_INVALID_HANDLE);
    CHECK_STATUS(engine_poll(other, request, 0, &ev), EMBER_STATUS_INVALID_HANDLE);
    CHECK(last_error_has("another engine"));
    CHECK_STATUS(engine_next_chunk_json(other, request, 0, &json), EMBER_STATUS_INVALID_HANDLE);
    CHECK(json == NULL);
    Drained d;
    drain(engine, request, &d);
    engine_request_free(request);
}

/* Several threads poll one request: every event goes to one of them (the final FINISHED too: the others see
   STREAM_DONE), and each thread's text stays valid. */
typedef struct {
    EmberEngine *engine;
    EmberRequest *request;
    uint32_t tokens;
    uint32_t finishes;
    size_t bytes;
    char copy[4096];
} Poller;

static void *poll_until_done(void *arg) {
    Poller *p = arg;
    for (;;) {
        EmberEvent ev;
        EmberStatus status = engine_poll(p->engine, p->request, -1, &ev);
        if (status == EMBER_STATUS_STREAM_DONE) return NULL;
        CHECK_STATUS(status, EMBER_STATUS_OK);
        if (ev.kind == EMBER_EVENT_KIND_FINISHED) {
            p->finishes++;
            continue;
        }
        CHECK(ev.kind == EMBER_EVENT_KIND_DELTA && p->bytes + ev.text_len < sizeof p->copy);
        memcpy(p->copy + p->bytes, ev.text, ev.text_len); /* reads this thread's text: ASan checks it is live */
        p->bytes += ev.text_len;
        p->tokens += ev.num_tokens;
    }
}

static void test_concurrent_polls(EmberEngine *engine, const Drained *reference) {
    enum { THREADS = 4 };
    EmberRequest *request = submit(engine, requests->reference);
    Poller pollers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pollers[i] = (Poller){.engine = engine, .request = request};
        CHECK(pthread_create(&threads[i], NULL, poll_until_done, &pollers[i]) == 0);
    }
    uint32_t tokens = 0, finishes = 0;
    size_t bytes = 0;
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        tokens += pollers[i].tokens;
        finishes += pollers[i].finishes;
        bytes += pollers[i].bytes;
    }
    /* Greedy: the same tokens as the single-threaded run, split among the threads; one FINISHED in all. */
    CHECK(tokens == reference->tokens && bytes == reference->text_len);
    CHECK(finishes == 1);
    check_stream_done(engine, request);
    engine_request_free(request);
}

/* A request freed while another thread is blocked polling it, and an engine freed under its requests. */
typedef struct {
    EmberEngine *engine;
    EmberRequest *request;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int first_event_seen;
    EmberStatus final_status;
} FreeRace;

static void *poll_until_refused(void *arg) {
    FreeRace *r = arg;
    EmberStatus status;
    EmberEvent ev;
    int signalled = 0;
    while ((status = engine_poll(r->engine, r->request, -1, &ev)) == EMBER_STATUS_OK) {
        if (!signalled) {
            pthread_mutex_lock(&r->lock);
            r->first_event_seen = 1;
            pthread_cond_signal(&r->changed);
            pthread_mutex_unlock(&r->lock);
            signalled = 1;
        }
    }
    r->final_status = status;
    return NULL;
}

static void run_free_race(FreeRace *r, void (*free_it)(FreeRace *)) {
    pthread_t thread;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    r->first_event_seen = 0;
    CHECK(pthread_create(&thread, NULL, poll_until_refused, r) == 0);
    pthread_mutex_lock(&r->lock);
    while (!r->first_event_seen) pthread_cond_wait(&r->changed, &r->lock);
    pthread_mutex_unlock(&r->lock);
    free_it(r); /* while the other thread is inside, or between, polls */
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK_STATUS(r->final_status, EMBER_STATUS_INVALID_HANDLE);
    pthread_cond_destroy(&r->changed);
    pthread_mutex_destroy(&r->lock);
}

static void free_request(FreeRace *r) { engine_request_free(r->request); }
static void free_engine(FreeRace *r) { engine_free(r->engine); }

static void test_free_while_polling(EmberEngine *engine) {
    FreeRace r = {.engine = engine};
    r.request = submit(engine, requests->long_running);
    /* Right after submission the prefill is still running, so a zero timeout almost surely times out; either
       answer is correct. */
    EmberEvent ev;
    EmberStatus first = engine_poll(engine, r.request, 0, &ev);
    CHECK(first == EMBER_STATUS_TIMEOUT || first == EMBER_STATUS_OK);
    CHECK(first == EMBER_STATUS_OK || last_error_has("no event within 0 ms"));
    run_free_race(&r, free_request);
    engine_request_free(r.request);
    CHECK(last_error_has("not a live request handle"));
}

static void test_engine_freed_while_polled(EmberEngine *doomed) {
    FreeRace r = {.engine = doomed};
    r.request = submit(doomed, requests->long_running);
    run_free_race(&r, free_engine);
    /* The engine is gone (a second free is harmless); its request still answers what does not need it. */
    engine_free(doomed);
    CHECK(last_error_has("engine_free"));
    EmberEvent ev;
    CHECK_STATUS(engine_poll(doomed, r.request, 0, &ev), EMBER_STATUS_INVALID_HANDLE);
    EmberStats stats = {.struct_size = sizeof stats};
    CHECK_STATUS(engine_get_stats(doomed, &stats), EMBER_STATUS_INVALID_HANDLE);
    CHECK_STATUS(engine_submit(doomed, requests->reference, &(EmberRequest *){NULL}), EMBER_STATUS_INVALID_HANDLE);
    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    CHECK_STATUS(engine_get_timing_metrics(r.request, &m), EMBER_STATUS_OK);
    CHECK(m.present & EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS);
    char *json = NULL;
    CHECK_STATUS(engine_response_json(r.request, &json), EMBER_STATUS_OK);
    CHECK(strstr(json, "\"finish_reason\":\"cancelled\"") != NULL);
    engine_string_free(json);
    engine_request_free(r.request);
    CHECK(strcmp(engine_last_error_message(), "") == 0);
}

/* A forked child inherits the parent's handles but not its engine threads: every use is refused with
 * EMBER_STATUS_FORKED (nothing queued that would never run), frees are refused too (no join of a thread that is
 * not there), and the child can still create an engine of its own. The parent's engine is unaffected. */
static int forked_child(EmberEngine *parent_engine, EmberRequest *parent_request) {
    int failures = 0;
#define CHILD_EXPECT(cond)                                                                                           \
    do {                                                                                                             \
        if (!(cond)) {                                                                                               \
            fprintf(stderr, "forked child: %s:%d: %s\n  last error: %s\n", __FILE__, __LINE__, #cond,                 \
                    engine_last_error_message());                                                                    \
            failures++;                                                                                              \
        }                                                                                                            \
    } while (0)
    EmberRequest *request = NULL;
    CHILD_EXPECT(engine_submit(parent_engine, requests->reference, &request) == EMBER_STATUS_FORKED);
    CHILD_EXPECT(request == NULL && last_error_names("engine_submit") && last_error_has("fork"));
    EmberStats stats = {.struct_size = sizeof stats};
    CHILD_EXPECT(engine_get_stats(parent_engine, &stats) == EMBER_STATUS_FORKED);
    EmberEvent ev;
    CHILD_EXPECT(engine_poll(parent_engine, parent_request, 0, &ev) == EMBER_STATUS_FORKED);
    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    CHILD_EXPECT(engine_get_timing_metrics(parent_request, &m) == EMBER_STATUS_FORKED);
    engine_request_free(parent_request);
    CHILD_EXPECT(last_error_names("engine_request_free") && last_error_has("fork"));
    engine_free(parent_engine);
    CHILD_EXPECT(last_error_names("engine_free") && last_error_has("fork"));
    /* What the fork rule asks: engines created after fork work. */
    EmberEngine *own = NULL;
    CHILD_EXPECT(engine_new(engine_config, &own) == EMBER_STATUS_OK);
    if (own != NULL) {
        CHILD_EXPECT(engine_submit(own, requests->reference, &request) == EMBER_STATUS_OK);
        CHILD_EXPECT(engine_poll(own, request, -1, &ev) == EMBER_STATUS_OK);
        engine_request_free(request);
        engine_free(own);
        CHILD_EXPECT(strcmp(engine_last_error_message(), "") == 0);
    }
#undef CHILD_EXPECT
    return failures;
}

/* An engine that speculates: a request's draft counts in its extended metrics, the engine's in its stats; a
   request that opts out has none. A model whose sliding-window layers have a pool of their own (Gemma 3) never
   speculates, and says so with zero counts. "draft_policy": "always" verifies every draft, so that whether a
   draft is tried does not depend on the step costs the adaptive policy learns from this machine's timing. */
static void test_speculative(void) {
    char config[256];
    snprintf(config, sizeof config,
             "{\"threads\": 1, \"kv_cache_tokens\": 1024, \"speculative\": {\"method\": \"ngram\", "
             "\"num_speculative_tokens\": 2, \"draft_policy\": \"always\"}}");
    EmberEngine *engine = NULL;
    CHECK_STATUS(engine_new(config, &engine), EMBER_STATUS_OK);
    char json[256];
    uint32_t drafts[2];
    for (int opt_out = 0; opt_out < 2; opt_out++) {
        snprintf(json, sizeof json, requests->speculative, opt_out ? ", \"speculative_decoding\": false" : "");
        EmberRequest *request = submit(engine, json);
        Drained d;
        drain(engine, request, &d);
        EmberExtendedTimingMetrics x = {.struct_size = sizeof x};
        CHECK_STATUS(engine_get_extended_metrics(request, 0, &x), EMBER_STATUS_OK);
        CHECK((x.present & EMBER_EXTENDED_NUM_DRAFT_TOKENS) && (x.present & EMBER_EXTENDED_NUM_ACCEPTED_TOKENS));
        CHECK(x.num_accepted_tokens <= x.num_draft_tokens);
        drafts[opt_out] = x.num_draft_tokens;
        engine_request_free(request);
    }
    const char *model = getenv("EMBER_MODEL");
    const int windowed = model != NULL && strstr(model, "gemma") != NULL;
    CHECK((windowed ? drafts[0] == 0 : drafts[0] > 0) && drafts[1] == 0);
    EmberStats stats = {.struct_size = sizeof stats};
    CHECK_STATUS(engine_get_stats(engine, &stats), EMBER_STATUS_OK);
    const uint32_t spec_bits = EMBER_STATS_SPEC_DECODE_NUM_DRAFT_TOKENS | EMBER_STATS_SPEC_DECODE_NUM_ACCEPTED_TOKENS;
    CHECK((stats.present & spec_bits) == spec_bits);
    CHECK(stats.spec_decode_num_draft_tokens == drafts[0]);
    CHECK(stats.spec_decode_num_accepted_tokens <= stats.spec_decode_num_draft_tokens);
    engine_free(engine);
}

/* Admission: with one seat and one waiting place, a third request is refused at once (EMBER_STATUS_OVERLOADED,
   an OpenAI error body with code "overloaded"); a request past its deadline_ms while waiting ends with
   EMBER_FINISH_REASON_DEADLINE; a request of a better priority takes the seat. */
static void test_admission(void) {
    char config[128];
    snprintf(config, sizeof config,
             "{\"threads\": 1, \"max_num_seqs\": 1, \"max_waiting_requests\": 1, \"served_model_name\": \"c\"}");
    EmberEngine *engine = NULL;
    CHECK_STATUS(engine_new(config, &engine), EMBER_STATUS_OK);
    EmberRequest *running = submit(engine, "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4000, "
                                            "\"ignore_eos\": true, \"priority\": 1}");
    EmberEvent ev;
    CHECK_STATUS(engine_poll(engine, running, -1, &ev), EMBER_STATUS_OK);
    CHECK(ev.kind == EMBER_EVENT_KIND_DELTA); /* it holds the one seat */
    EmberRequest *waiting =
        submit(engine, "{\"prompt\": \"Hello\", \"max_tokens\": 4, \"deadline_ms\": 1, \"priority\": 1}");
    EmberRequest *refused = NULL;
    CHECK_STATUS(engine_submit(engine, "{\"prompt\": \"Hi\", \"max_tokens\": 4}", &refused),
                 EMBER_STATUS_OVERLOADED);
    CHECK(refused == NULL && last_error_has("\"code\":\"overloaded\""));
    Drained d;
    drain(engine, waiting, &d);
    CHECK(d.reason == EMBER_FINISH_REASON_DEADLINE && d.tokens == 0);
    engine_request_free(waiting);
    /* Its place is free again: a request of a better priority is admitted, preempting the running one. */
    EmberRequest *urgent = submit(engine, "{\"prompt\": \"Hello\", \"max_tokens\": 3, \"ignore_eos\": true}");
    drain(engine, urgent, &d);
    CHECK(d.reason == EMBER_FINISH_REASON_LENGTH && d.tokens == 3);
    EmberExtendedTimingMetrics x = {.struct_size = sizeof x};
    CHECK_STATUS(engine_get_extended_metrics(running, 0, &x), EMBER_STATUS_OK);
    CHECK(x.num_preemptions >= 1);
    /* The Prometheus text counts what happened: the deadline, the overloaded submit; every sample names the model
       (served_model_name). */
    char *text = NULL;
    CHECK_STATUS(engine_metrics_text(engine, &text), EMBER_STATUS_OK);
    CHECK(strstr(text, "ember_request_success_total{model_name=\"c\",finished_reason=\"deadline\"} 1\n") != NULL);
    CHECK(strstr(text, "\nember_request_overloaded_total{model_name=\"c\"} 1\n") != NULL);
    CHECK(strstr(text, "# TYPE ember_e2e_request_latency_seconds histogram\n") != NULL);
    engine_string_free(text);
    CHECK_FAILS_AS(engine_metrics_text(engine, NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_metrics_text");
    CHECK_FAILS_AS(engine_metrics_text(NULL, &text), EMBER_STATUS_INVALID_ARGUMENT, "engine_metrics_text");
    engine_request_free(urgent);
    engine_request_free(running);
    engine_free(engine);
}

/* Load progress: fractions from 0 to 1, never decreasing, 1 once and last; a false answer at any report ends
   engine_new_with_progress with EMBER_STATUS_LOAD_CANCELLED and no engine; the load time is in the stats. */
typedef struct {
    int calls;
    int cancel_at; /* answer false at this call (1-based); 0: never */
    float last;
    int decreased;
    int ones;
} Progress;

static bool record_progress(void *userdata, float fraction) {
    Progress *p = userdata;
    p->calls++;
    if (fraction < p->last) p->decreased = 1;
    if (fraction == 1.0f) p->ones++;
    p->last = fraction;
    return p->calls != p->cancel_at;
}

static void test_load_progress(void) {
    Progress p = {0};
    EmberEngine *engine = NULL;
    CHECK_STATUS(engine_new_with_progress(engine_config, record_progress, &p, &engine), EMBER_STATUS_OK);
    CHECK(engine != NULL && p.calls >= 3 && !p.decreased && p.ones == 1 && p.last == 1.0f);
    EmberStats stats = {.struct_size = sizeof stats};
    CHECK_STATUS(engine_get_stats(engine, &stats), EMBER_STATUS_OK);
    CHECK((stats.present & EMBER_STATS_MODEL_LOAD_TIME_MS) && stats.model_load_time_ms > 0.0);
    engine_free(engine);
    const int all_calls = p.calls;
    /* Cancelled at the first report, in the middle of the read, and at the last (the engine had started). */
    const int cancel_points[] = {1, 2, all_calls};
    for (size_t i = 0; i < sizeof cancel_points / sizeof cancel_points[0]; i++) {
        Progress c = {.cancel_at = cancel_points[i]};
        engine = NULL;
        CHECK_FAILS_AS(engine_new_with_progress(engine_config, record_progress, &c, &engine),
                       EMBER_STATUS_LOAD_CANCELLED, "engine_new_with_progress");
        CHECK(engine == NULL && c.calls == cancel_points[i]);
    }
    /* No callback: engine_new. */
    CHECK_STATUS(engine_new_with_progress(engine_config, NULL, NULL, &engine), EMBER_STATUS_OK);
    engine_free(engine);
    CHECK_FAILS_AS(engine_new_with_progress(engine_config, record_progress, &p, NULL),
                   EMBER_STATUS_INVALID_ARGUMENT, "engine_new_with_progress");
}

/* The tokenizer, chat template and model description: a size query then the copy, a round trip through the text,
   special tokens parsed only when asked, the chat prompt's ids equal to tokenizing its text, and the refusals. */
static void test_tokenizer(EmberEngine *engine) {
    const char *text = "Hello, world!";
    size_t n = 0;
    CHECK_STATUS(engine_tokenize(engine, text, strlen(text), true, false, NULL, 0, &n), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK(n > 0 && n < 16);
    uint32_t ids[16];
    uint32_t untouched = 0xdeadbeef;
    ids[0] = untouched;
    CHECK_STATUS(engine_tokenize(engine, text, strlen(text), true, false, ids, n - 1, &n), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK(ids[0] == untouched);
    size_t count = 0;
    CHECK_STATUS(engine_tokenize(engine, text, strlen(text), true, false, ids, 16, &count), EMBER_STATUS_OK);
    CHECK(count == n);
    char *back = NULL;
    CHECK_STATUS(engine_detokenize(engine, ids, count, false, &back), EMBER_STATUS_OK);
    CHECK(strcmp(back, text) == 0);
    engine_string_free(back);

    /* A control token's text is one token only with parse_special; it writes its text only with include_special. */
    const char *model = getenv("EMBER_MODEL");
    const char *control = model != NULL && strstr(model, "gemma") != NULL ? "<end_of_turn>" : "<|im_end|>";
    CHECK_STATUS(engine_tokenize(engine, control, strlen(control), false, true, ids, 16, &count), EMBER_STATUS_OK);
    CHECK(count == 1);
    CHECK_STATUS(engine_detokenize(engine, ids, 1, false, &back), EMBER_STATUS_OK);
    CHECK(strcmp(back, "") == 0);
    engine_string_free(back);
    CHECK_STATUS(engine_detokenize(engine, ids, 1, true, &back), EMBER_STATUS_OK);
    CHECK(strcmp(back, control) == 0);
    engine_string_free(back);
    CHECK_STATUS(engine_tokenize(engine, control, strlen(control), false, true, ids, 16, &count), EMBER_STATUS_OK);
    /* engine_token_bytes gives a control token's text, with the size-query convention of engine_tokenize. */
    size_t len = 0;
    CHECK_STATUS(engine_token_bytes(engine, ids[0], NULL, 0, &len), EMBER_STATUS_BUFFER_TOO_SMALL);
    CHECK(len == strlen(control));
    uint8_t piece[64];
    CHECK_STATUS(engine_token_bytes(engine, ids[0], piece, sizeof piece, &len), EMBER_STATUS_OK);
    CHECK(len == strlen(control) && memcmp(piece, control, len) == 0);
    CHECK_STATUS(engine_tokenize(engine, control, strlen(control), false, false, ids, 16, &count), EMBER_STATUS_OK);
    CHECK(count > 1);
    /* The empty text: nothing, or BOS alone (Gemma), which a size query reports. */
    EmberStatus empty = engine_tokenize(engine, NULL, 0, true, true, NULL, 0, &count);
    CHECK(empty == EMBER_STATUS_OK ? count == 0 : empty == EMBER_STATUS_BUFFER_TOO_SMALL && count == 1);

    /* The chat prompt's ids are its text tokenized with special tokens parsed and BOS added. */
    char *prompt = NULL;
    CHECK_STATUS(engine_apply_chat_template(engine, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi!\"}]}",
                                            &prompt),
                 EMBER_STATUS_OK);
    CHECK(strstr(prompt, "\"prompt\":") != NULL && strstr(prompt, "\"prompt_token_ids\":[") != NULL);
    engine_string_free(prompt);
    CHECK_STATUS(engine_apply_chat_template(engine, "{\"messages\": [{\"role\": \"user\"}]}", &prompt),
                 EMBER_STATUS_INVALID_REQUEST);
    CHECK(last_error_has("\"param\":\"messages[0].content\""));

    char *info = NULL;
    CHECK_STATUS(engine_model_info_json(engine, &info), EMBER_STATUS_OK);
    CHECK(strstr(info, "\"max_model_len\":") != NULL && strstr(info, "\"sha256\":\"") != NULL);
    CHECK(strstr(info, "\"vocab_size\":") != NULL && strstr(info, "\"backend\":{\"kind\":\"cpu\"") != NULL);
    engine_string_free(info);

    /* Refusals, each naming its function. */
    uint32_t bad = 4000000000u;
    CHECK_FAILS_AS(engine_detokenize(engine, &bad, 1, false, &back), EMBER_STATUS_INVALID_ARGUMENT, "engine_detokenize");
    CHECK(last_error_has("outside the vocabulary"));
    CHECK_FAILS_AS(engine_detokenize(engine, NULL, 2, false, &back), EMBER_STATUS_INVALID_ARGUMENT, "engine_detokenize");
    CHECK_FAILS_AS(engine_token_bytes(engine, bad, piece, sizeof piece, &len), EMBER_STATUS_INVALID_ARGUMENT,
                   "engine_token_bytes");
    CHECK_FAILS_AS(engine_token_bytes(engine, 1, NULL, 4, &len), EMBER_STATUS_INVALID_ARGUMENT, "engine_token_bytes");
    CHECK_FAILS_AS(engine_tokenize(engine, "\xff", 1, true, true, ids, 16, &count), EMBER_STATUS_INVALID_UTF8,
                   "engine_tokenize");
    CHECK_FAILS_AS(engine_tokenize(engine, NULL, 3, true, true, ids, 16, &count), EMBER_STATUS_INVALID_ARGUMENT,
                   "engine_tokenize");
    CHECK_FAILS_AS(engine_tokenize(engine, text, 5, true, true, NULL, 4, &count), EMBER_STATUS_INVALID_ARGUMENT,
                   "engine_tokenize");
    CHECK_FAILS_AS(engine_tokenize(engine, text, 5, true, true, ids, 16, NULL), EMBER_STATUS_INVALID_ARGUMENT,
                   "engine_tokenize");
    CHECK_FAILS_AS(engine_model_info_json(NULL, &info), EMBER_STATUS_INVALID_ARGUMENT, "engine_model_info_json");
    CHECK_FAILS_AS(engine_model_info_json(engine, NULL), EMBER_STATUS_INVALID_ARGUMENT, "engine_model_info_json");
    CHECK_FAILS_AS(engine_apply_chat_template(engine, NULL, &prompt), EMBER_STATUS_INVALID_ARGUMENT,
                   "engine_apply_chat_template");
}

static void test_fork(EmberEngine *engine) {
    EmberRequest *request = submit(engine, requests->reference);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        /* The child ends by exec, not exit: its memory holds what the parent's engine threads owned, which no
         * thread of the child can free, and a leak checker run at its exit (LeakSanitizer, valgrind) would count
         * it. exec replaces the image without exit handlers; valgrind does not follow it (no --trace-children). */
        const char *code = forked_child(engine, request) == 0 ? "exit 0" : "exit 1";
        execl("/bin/sh", "sh", "-c", code, (char *)NULL);
        _exit(2);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The parent's request and engine are untouched. */
    Drained d;
    drain(engine, request, &d);
    engine_request_free(request);
    CHECK(strcmp(engine_last_error_message(), "") == 0);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2 && strcmp(argv[2], "--short") == 0) requests = &SHORT_REQUESTS;
    const int part = argc > 3 ? atoi(argv[3]) : 0;
    CHECK(part >= 0 && part <= 2);
    const bool first = part != 2, second = part != 1;
    snprintf(engine_config, sizeof engine_config,
             "{\"threads\": %d, \"kv_cache_tokens\": 1024, \"max_num_seqs\": 8}", threads);
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("ember %s, engine config %s%s\n", engine_version(), engine_config,
           part == 1 ? ", first half" : part == 2 ? ", second half" : "");

    test_static_functions();
    test_null_arguments();
    test_bad_configurations();

    /* Two halves that take about the same time under valgrind: the tests of the shared engines, and those that
       make engines of their own. */
    if (first) {
        CHECK_STATUS(engine_set_log_callback(count_log_line, &log_lines), EMBER_STATUS_OK);
        EmberEngine *engine = new_engine();
        EmberEngine *other = new_engine();
        CHECK_STATUS(engine_set_log_callback(NULL, NULL), EMBER_STATUS_OK);
        CHECK(__atomic_load_n(&log_lines, __ATOMIC_RELAXED) >= 2);

        Drained reference;
        printf("invalid requests\n");
        test_invalid_requests(engine);
        printf("generation and metrics\n");
        test_generation_and_metrics(engine, &reference);
        printf("cancel, two choices\n");
        test_cancel_and_choices(engine);
        printf("stream chunks\n");
        test_stream_chunks(engine);
        printf("logprobs in the JSON\n");
        test_logprobs_json(engine);
        printf("handle misuse\n");
        test_handle_misuse(engine, other);
        printf("concurrent polls\n");
        test_concurrent_polls(engine, &reference);
        printf("request freed while polled\n");
        test_free_while_polling(engine);
        printf("engine freed while polled\n");
        test_engine_freed_while_polled(other);
        printf("tokenizer and model info\n");
        test_tokenizer(engine);
        printf("fork\n");
        test_fork(engine);

        engine_free(engine);
        CHECK(strcmp(engine_last_error_message(), "") == 0);
        engine_free(engine);
        CHECK(last_error_has("not a live engine handle"));
    }
    if (second) {
        printf("speculative decoding\n");
        test_speculative();
        printf("admission\n");
        test_admission();
        printf("load progress\n");
        test_load_progress();
    }
    printf("ok: %d checks\n", checks_run);
    return 0;
}
