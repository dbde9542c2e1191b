/*
 * One host thread serves every request: the event-driven C API as an epoll server uses it. The thread submits
 * REQUESTS requests at once with engine_submit_with_user_data (alternately EMBER_DELIVERY_EVENTS and
 * EMBER_DELIVERY_CHUNKS), waits on engine_events_fd with epoll, takes records with engine_wait_events until it
 * times out, and checks that nothing is lost or duplicated:
 *   - every record names its request and carries its user_data;
 *   - an events request gets deltas, then one FINISHED marked last; a chunks request gets chunk bodies, then one
 *     STREAM_DONE marked last; nothing comes after a request's last record;
 *   - a request's delta tokens add up to its completion tokens, and its five metrics are readable;
 *   - every 50th request is cancelled after its first record (it finishes as cancelled, or had already ended);
 *     every 97th is freed after its first record (nothing more comes for it);
 *   - the process has no thread per request (its thread count stays that of the engine, whatever REQUESTS is);
 *   - engine_events_wakeup ends a wait with no records, and an engine freed under a waiting thread ends it.
 * Run under AddressSanitizer with 1,000 requests on the real model, and under valgrind with 1,000 requests on
 * a tiny synthetic model (`ember-cli synthetic PATH --tiny`: every token of the real model costs ~100x more
 * there, and what is checked here is the event path, not the model); see c.mk.
 *
 * Usage: test_events [REQUESTS] [THREADS]
 */
#include "ember.h"
#include "check.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* What the host knows of one request: what a server keeps per stream. */
typedef struct {
    EmberRequest *request;
    uint32_t delivery;
    int records;
    uint32_t delta_tokens;
    int finishes;
    int chunks;
    EmberFinishReason reason;
    int last;
    int cancelled;
    size_t freed; /* the batch in which the host freed it (0: not freed) */
} Stream;

/* Threads of this process, from /proc/self/status. */
static int process_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    int threads = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Threads: %d", &threads) == 1) break;
    }
    fclose(f);
    return threads;
}

/* Takes one record of stream `s`, as a server would write it to its client. */
static void on_record(Stream *s, size_t index, const EmberEventRecord *r) {
    CHECK(!s->last);
    CHECK(!s->freed);
    s->records++;
    const EmberEvent *e = &r->event;
    if (s->delivery == EMBER_DELIVERY_EVENTS) {
        switch (e->kind) {
        case EMBER_EVENT_KIND_DELTA:
            CHECK(s->finishes == 0);
            CHECK(e->text != NULL && e->text[e->text_len] == '\0');
            s->delta_tokens += e->num_tokens;
            break;
        case EMBER_EVENT_KIND_FINISHED:
            s->finishes++;
            s->reason = e->finish_reason;
            CHECK(r->last);
            break;
        default:
            fprintf(stderr, "request %zu: event kind %u\n", index, (unsigned)e->kind);
            CHECK(0);
        }
    } else {
        switch (e->kind) {
        case EMBER_EVENT_KIND_CHUNK:
            CHECK(e->text != NULL && e->text_len > 2 && e->text[0] == '{' && e->text[e->text_len] == '\0');
            s->chunks++;
            break;
        case EMBER_EVENT_KIND_STREAM_DONE:
            CHECK(r->last && s->chunks > 0);
            break;
        default:
            fprintf(stderr, "request %zu: event kind %u\n", index, (unsigned)e->kind);
            CHECK(0);
        }
    }
    s->last = r->last;
}

typedef struct {
    EmberEngine *engine;
    EmberStatus status;
} Waiter;

static void *wait_forever(void *arg) {
    Waiter *w = arg;
    EmberEventRecord record;
    size_t count = 0;
    w->status = engine_wait_events(w->engine, -1, &record, 1, &count);
    return NULL;
}

int main(int argc, char **argv) {
    const size_t n = argc > 1 ? (size_t)atoi(argv[1]) : 1000;
    const int threads = argc > 2 ? atoi(argv[2]) : 1;
    CHECK(n >= 51); /* the cancelled (every 50th) and freed (every 97th, 0 included) cases */
    char config[160];
    snprintf(config, sizeof config,
             "{\"threads\": %d, \"kv_cache_tokens\": 4096, \"max_num_seqs\": 64, \"max_waiting_requests\": %zu}",
             threads, n);
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("ember %s: %zu requests from one thread, engine config %s\n", engine_version(), n, config);

    EmberEngine *engine = NULL;
    CHECK_STATUS(engine_new(config, &engine), EMBER_STATUS_OK);
    const int threads_before = process_threads();
    int fd = -1;
    CHECK_STATUS(engine_events_fd(engine, &fd), EMBER_STATUS_OK);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event interest = {.events = EPOLLIN, .data = {.u64 = 0}};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &interest) == 0);

    Stream *streams = calloc(n, sizeof *streams);
    CHECK(streams != NULL);
    for (size_t i = 0; i < n; i++) {
        char body[200];
        /* Control tokens write their text, so that every generated token but a stop token is in some delta (a
           synthetic model's random tokens include control tokens). */
        snprintf(body, sizeof body,
                 "{\"prompt\": \"%zu,\", \"max_tokens\": 3, \"temperature\": 0, \"skip_special_tokens\": false%s}",
                 i, i % 2 ? ", \"stream\": true" : "");
        streams[i].delivery = i % 2 ? EMBER_DELIVERY_CHUNKS : EMBER_DELIVERY_EVENTS;
        CHECK_STATUS(engine_submit_with_user_data(engine, body, 7000 + i, streams[i].delivery, &streams[i].request),
                     EMBER_STATUS_OK);
    }

    size_t open = n, batches = 0, records_seen = 0;
    int max_threads = process_threads();
    EmberEventRecord records[64];
    while (open > 0) {
        struct epoll_event ready;
        int woke = epoll_wait(ep, &ready, 1, -1);
        CHECK(woke == 1);
        /* Take everything that waits, as a level-triggered loop would before it polls again. */
        for (;;) {
            size_t count = 0;
            EmberStatus status = engine_wait_events(engine, 0, records, 64, &count);
            if (status == EMBER_STATUS_TIMEOUT) {
                CHECK(count == 0);
                break;
            }
            CHECK_STATUS(status, EMBER_STATUS_OK);
            CHECK(count >= 1 && count <= 64);
            batches++;
            records_seen += count;
            for (size_t k = 0; k < count; k++) {
                const EmberEventRecord *r = &records[k];
                CHECK(r->user_data >= 7000 && r->user_data < 7000 + n);
                size_t i = (size_t)(r->user_data - 7000);
                Stream *s = &streams[i];
                CHECK(r->request == s->request);
                if (s->freed) {
                    /* Only the rest of the batch it was freed in: a later call returns no record of it. */
                    CHECK(s->freed == batches);
                    continue;
                }
                on_record(s, i, r);
                if (s->last) {
                    open--;
                } else if (s->records == 1 && i % 97 == 0) {
                    engine_request_free(s->request);
                    s->freed = batches;
                    open--;
                } else if (s->records == 1 && i % 50 == 0) {
                    CHECK_STATUS(engine_cancel(s->request), EMBER_STATUS_OK);
                    s->cancelled = 1;
                }
            }
        }
        int now = process_threads();
        if (now > max_threads) max_threads = now;
    }
    printf("%zu records in %zu batches; threads: %d with the engine, at most %d while serving\n", records_seen,
           batches, threads_before, max_threads);
    CHECK(max_threads <= threads_before);

    int cancelled_finishes = 0;
    for (size_t i = 0; i < n; i++) {
        Stream *s = &streams[i];
        if (s->freed) continue;
        CHECK(s->last);
        EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
        CHECK_STATUS(engine_get_timing_metrics(s->request, &m), EMBER_STATUS_OK);
        if (s->delivery == EMBER_DELIVERY_EVENTS) {
            CHECK(s->finishes == 1);
            CHECK(s->reason == EMBER_FINISH_REASON_STOP || s->reason == EMBER_FINISH_REASON_LENGTH ||
                  (s->cancelled && s->reason == EMBER_FINISH_REASON_CANCELLED));
            cancelled_finishes += s->reason == EMBER_FINISH_REASON_CANCELLED;
            /* Every generated token's text was delivered: the deltas cover the choice's tokens (a stop token has
               no text and no delta). */
            size_t generated = 0;
            EmberStatus status = engine_get_token_timestamps(s->request, 0, NULL, 0, &generated);
            CHECK(status == EMBER_STATUS_OK || status == EMBER_STATUS_BUFFER_TOO_SMALL);
            CHECK(generated <= 3);
            CHECK(s->delta_tokens == generated || s->delta_tokens + 1 == generated);
        }
        if (!s->cancelled && s->delivery == EMBER_DELIVERY_EVENTS) {
            CHECK(m.present & EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS);
        }
        engine_request_free(s->request);
    }
    printf("cancelled mid-stream and finished as cancelled: %d\n", cancelled_finishes);

    /* Nothing is left: a wait times out, the descriptor is quiet; a wakeup ends a wait with no records. */
    size_t count = 99;
    CHECK_STATUS(engine_wait_events(engine, 0, records, 64, &count), EMBER_STATUS_TIMEOUT);
    CHECK(count == 0);
    struct epoll_event ready;
    CHECK(epoll_wait(ep, &ready, 1, 0) == 0);
    CHECK_STATUS(engine_events_wakeup(engine), EMBER_STATUS_OK);
    CHECK(epoll_wait(ep, &ready, 1, -1) == 1);
    CHECK_STATUS(engine_wait_events(engine, -1, records, 64, &count), EMBER_STATUS_OK);
    CHECK(count == 0);
    CHECK(epoll_wait(ep, &ready, 1, 0) == 0);

    /* Misuse: unknown delivery, zero capacity, NULL arguments. */
    EmberRequest *request = NULL;
    CHECK_STATUS(engine_submit_with_user_data(engine, "{\"prompt\": \"a\"}", 1, 9, &request),
                 EMBER_STATUS_INVALID_ARGUMENT);
    CHECK(request == NULL);
    CHECK_STATUS(engine_wait_events(engine, 0, records, 0, &count), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_wait_events(engine, 0, NULL, 4, &count), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_wait_events(engine, 0, records, 4, NULL), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_events_fd(engine, NULL), EMBER_STATUS_INVALID_ARGUMENT);

    /* An engine freed under a thread blocked in engine_wait_events ends its wait. */
    Waiter waiter = {.engine = engine, .status = EMBER_STATUS_OK};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_forever, &waiter) == 0);
    close(ep);
    engine_free(engine);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(waiter.status == EMBER_STATUS_INVALID_HANDLE);
    CHECK_STATUS(engine_events_wakeup(engine), EMBER_STATUS_INVALID_HANDLE);
    free(streams);
    printf("ok: %d checks\n", checks_run);
    return 0;
}
