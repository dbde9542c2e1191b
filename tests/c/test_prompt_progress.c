/*
 * Prompt progress from C (`"return_progress": true`, docs/c_api.md "Prompt progress"): engine_poll gives
 * EMBER_EVENT_KIND_PROMPT_PROGRESS events before the first DELTA, each text llama-server's `prompt_progress`
 * object with num_tokens its `processed`, from the cached prefix to the whole prompt one prefill chunk at a time;
 * engine_next_chunk_json gives progress chunks before the stream's own; a request that does not ask gets none.
 * The model comes from EMBER_MODEL or the default path; steps of 8 tokens split the prompt into chunks.
 */
#include "check.h"

#include <string.h>

/* A prompt of a few dozen tokens: several chunks, and two full blocks of 16 for the prefix cache. */
#define PROMPT "\"prompt\": \"The days of the week are Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and " \
               "Sunday. The months of the year are January, February, March, April, May, June, July,\""
static const char *const ASKED =
    "{" PROMPT ", \"max_tokens\": 3, \"temperature\": 0, \"stream\": true, \"return_progress\": true}";
static const char *const PLAIN = "{" PROMPT ", \"max_tokens\": 3, \"temperature\": 0, \"stream\": true}";

/* One `prompt_progress` object, read from the text ember writes (its four integers, in llama-server's order). */
typedef struct {
    unsigned total, cache, processed;
    unsigned long long time_ms;
} Progress;

static Progress parse(const char *text, size_t len) {
    char copy[128];
    CHECK(len < sizeof copy);
    memcpy(copy, text, len);
    copy[len] = '\0';
    Progress p;
    CHECK(sscanf(copy, "{\"total\":%u,\"cache\":%u,\"processed\":%u,\"time_ms\":%llu}", &p.total, &p.cache,
                 &p.processed, &p.time_ms) == 4);
    return p;
}

/* The progress reports of one request read with engine_poll; their number. */
static int poll_progress(EmberEngine *engine, const char *body, Progress *out, int capacity) {
    EmberRequest *request = NULL;
    CHECK_STATUS(engine_submit(engine, body, &request), EMBER_STATUS_OK);
    EmberEvent event;
    EmberStatus status;
    int n = 0, deltas = 0;
    while ((status = engine_poll(engine, request, -1, &event)) == EMBER_STATUS_OK) {
        CHECK(event.kind != EMBER_EVENT_KIND_ERROR);
        if (event.kind == EMBER_EVENT_KIND_DELTA) deltas++;
        if (event.kind != EMBER_EVENT_KIND_PROMPT_PROGRESS) continue;
        CHECK(deltas == 0); /* before the first token */
        CHECK(n < capacity);
        CHECK(event.choice == 0 && event.finish_reason == EMBER_FINISH_REASON_NONE);
        out[n] = parse(event.text, event.text_len);
        CHECK(event.num_tokens == out[n].processed);
        n++;
    }
    CHECK_STATUS(status, EMBER_STATUS_STREAM_DONE);
    CHECK(deltas > 0);
    engine_request_free(request);
    return n;
}

/* The chunks of one request read with engine_next_chunk_json: how many carry `prompt_progress`, all first. */
static int chunk_progress(EmberEngine *engine, const char *body) {
    EmberRequest *request = NULL;
    CHECK_STATUS(engine_submit(engine, body, &request), EMBER_STATUS_OK);
    char *chunk = NULL;
    EmberStatus status;
    int progress = 0, others = 0;
    while ((status = engine_next_chunk_json(engine, request, -1, &chunk)) == EMBER_STATUS_OK) {
        if (strstr(chunk, "\"prompt_progress\":{\"total\":") != NULL) {
            CHECK(others == 0);
            CHECK(strstr(chunk, "\"text\":\"\"") != NULL);
            progress++;
        } else {
            others++;
        }
        engine_string_free(chunk);
    }
    CHECK_STATUS(status, EMBER_STATUS_STREAM_DONE);
    CHECK(others > 0);
    engine_request_free(request);
    return progress;
}

int main(void) {
    EmberEngine *engine = NULL;
    CHECK_STATUS(engine_new("{\"threads\": 1, \"max_num_batched_tokens\": 8}", &engine), EMBER_STATUS_OK);

    Progress p[64];
    int n = poll_progress(engine, ASKED, p, 64);
    /* The admission (nothing cached yet), then one per chunk of at most 8 tokens, the last the whole prompt. */
    CHECK(n >= 3);
    CHECK(p[0].cache == 0 && p[0].processed == 0 && p[0].time_ms == 0);
    for (int i = 1; i < n; i++) {
        CHECK(p[i].total == p[0].total && p[i].cache == 0);
        CHECK(p[i].processed > p[i - 1].processed && p[i].processed - p[i - 1].processed <= 8);
        CHECK(p[i].time_ms >= p[i - 1].time_ms);
    }
    CHECK(p[n - 1].processed == p[0].total);

    /* The same prompt again: the prefix cache's blocks first. */
    Progress again[64];
    int m = poll_progress(engine, ASKED, again, 64);
    CHECK(m >= 2 && again[0].cache > 0 && again[0].processed == again[0].cache);
    CHECK(again[m - 1].processed == again[0].total);

    CHECK(poll_progress(engine, PLAIN, p, 64) == 0);
    CHECK(chunk_progress(engine, ASKED) >= 2);
    CHECK(chunk_progress(engine, PLAIN) == 0);

    engine_free(engine);
    printf("test_prompt_progress: %d checks passed\n", checks_run);
    return 0;
}
