/*
 * Embeddings and reranking from C, used and misused: engine_embed_vectors and engine_rerank_scores, every
 * accessor of their result (EmberEmbeddings), its timing metrics under struct_size, refusals that leave the output
 * untouched, NULL, freed and foreign handles, double frees, a result outliving its engine, and threads embedding
 * at once (each result the same bits as one call alone). Run under AddressSanitizer + UBSan and valgrind (c.mk):
 * any memory error, leak or crash fails the run, and so does any CHECK.
 *
 * Usage: test_embed EMBEDDER.gguf RERANKER.gguf   (synthetic files: ember-cli synthetic --family bge-small and
 * --family bge-small-rerank, with llama.cpp's BERT vocabulary)
 */
#include "ember.h"
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define TEXTS "[\"Hello, world!\", \"Embeddings from C\", \"a\"]"

/* Whether this thread's last error message contains `needle`. */
static int last_error_has(const char *needle) { return strstr(engine_last_error_message(), needle) != NULL; }

static EmberEngine *new_engine(const char *model, const char *extra) {
    char config[4096];
    snprintf(config, sizeof config, "{\"model\": \"%s\", \"threads\": 2%s}", model, extra);
    EmberEngine *engine = NULL;
    CHECK_STATUS(engine_new(config, &engine), EMBER_STATUS_OK);
    return engine;
}

/* A result's contents, read through every accessor. */
typedef struct {
    const float *floats;
    const uint32_t *tokens;
    const char *json;
    size_t count, dimensions;
} Rows;

static Rows rows(const EmberEmbeddings *result) {
    Rows r = {0};
    CHECK_STATUS(engine_embeddings_floats(result, &r.floats), EMBER_STATUS_OK);
    CHECK_STATUS(engine_embeddings_input_tokens(result, &r.tokens), EMBER_STATUS_OK);
    CHECK_STATUS(engine_embeddings_json(result, &r.json), EMBER_STATUS_OK);
    CHECK_STATUS(engine_embeddings_count(result, &r.count), EMBER_STATUS_OK);
    CHECK_STATUS(engine_embeddings_dimensions(result, &r.dimensions), EMBER_STATUS_OK);
    return r;
}

/* The integer after `"key":` in a JSON text. */
static unsigned json_uint(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(json, pattern);
    CHECK(at != NULL);
    unsigned value = 0;
    CHECK(sscanf(at + strlen(pattern), "%u", &value) == 1);
    return value;
}

static void vectors_and_their_body(EmberEngine *engine) {
    EmberEmbeddings *result = NULL;
    CHECK_STATUS(engine_embed_vectors(engine, "{\"input\": " TEXTS ", \"include_metrics\": true}", &result),
                 EMBER_STATUS_OK);
    Rows r = rows(result);
    CHECK(r.count == 3 && r.dimensions == 384);
    unsigned total = 0;
    for (size_t i = 0; i < r.count; i++) {
        double norm = 0;
        const float *row = r.floats + i * r.dimensions;
        for (size_t j = 0; j < r.dimensions; j++) norm += (double)row[j] * row[j];
        CHECK(fabs(sqrt(norm) - 1.0) < 1e-5);   /* unit length by default */
        CHECK(r.tokens[i] >= 3);               /* [CLS] text [SEP] */
        total += r.tokens[i];
    }
    CHECK(total == json_uint(r.json, "prompt_tokens"));
    CHECK(strstr(r.json, "\"prompt_tokens_per_input\":[") != NULL);
    CHECK(strstr(r.json, "\"metrics\":{\"time_to_first_token_ms\":") != NULL);

    /* The five metrics, under struct_size's rules: nothing is generated, so two are always absent. */
    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    CHECK_STATUS(engine_get_embeddings_timing_metrics(result, &m), EMBER_STATUS_OK);
    CHECK(m.present ==
          (EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS | EMBER_TIMING_QUEUE_TIME_MS | EMBER_TIMING_TOKENS_PER_SECOND));
    CHECK(m.time_to_first_token_ms > 0 && m.queue_time_ms >= 0 && m.tokens_per_second > 0);
    CHECK(isnan(m.generation_time_ms) && isnan(m.mean_itl_ms));
    unsigned char bytes[sizeof m];
    memset(bytes, 0xAB, sizeof bytes);
    uint32_t declared = 16;
    memcpy(bytes, &declared, sizeof declared);
    EmberPerRequestTimingMetrics *short_struct = (EmberPerRequestTimingMetrics *)(void *)bytes;
    CHECK_STATUS(engine_get_embeddings_timing_metrics(result, short_struct), EMBER_STATUS_OK);
    for (size_t i = 16; i < sizeof bytes; i++) CHECK(bytes[i] == 0xAB);   /* nothing past struct_size */
    EmberPerRequestTimingMetrics tiny = {.struct_size = 4};
    CHECK_STATUS(engine_get_embeddings_timing_metrics(result, &tiny), EMBER_STATUS_INVALID_ARGUMENT);

    /* The body belongs to the result: engine_string_free refuses it, and the result reads on. */
    engine_string_free((char *)r.json);
    CHECK(last_error_has("not a string from ember"));
    Rows again = rows(result);
    CHECK(again.floats == r.floats && strcmp(again.json, r.json) == 0);
    engine_embeddings_free(result);

    /* dimensions: the first 64, normalized again. */
    CHECK_STATUS(engine_embed_vectors(engine, "{\"input\": \"a\", \"dimensions\": 64}", &result), EMBER_STATUS_OK);
    r = rows(result);
    CHECK(r.count == 1 && r.dimensions == 64);
    engine_embeddings_free(result);
}

static void refusals_leave_the_output_alone(EmberEngine *engine) {
    EmberEmbeddings *result = NULL;
    const char *bodies[] = {
        "{\"input\": \"a\", \"dimensions\": 100000}", "{\"input\": \"a\", \"deadline_ms\": 0}",
        "{\"input\": \"a\", \"include_metrics\": 1}", "{\"input\": [[101, 4294967295]]}", "[1", "{\"input\": []}",
    };
    const char *fields[] = {"dimensions", "deadline_ms", "include_metrics", "input[0]", "not JSON", "input"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        CHECK_STATUS(engine_embed_vectors(engine, bodies[i], &result), EMBER_STATUS_INVALID_REQUEST);
        CHECK(result == NULL);
        CHECK(last_error_has(fields[i]));
        CHECK(strncmp(engine_last_error_message(), "engine_embed_vectors: ", 22) == 0);
    }
    CHECK_STATUS(engine_embed_vectors(engine, "{\"input\": \"caf\xe9\"}", &result), EMBER_STATUS_INVALID_UTF8);
    CHECK_STATUS(engine_embed_vectors(engine, NULL, &result), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_embed_vectors(engine, "{\"input\": \"a\"}", NULL), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_embed_vectors(NULL, "{\"input\": \"a\"}", &result), EMBER_STATUS_INVALID_ARGUMENT);
    /* An embedding model has no head to rank with. */
    CHECK_STATUS(engine_rerank_scores(engine, "{\"query\": \"q\", \"documents\": [\"a\"]}", &result),
                 EMBER_STATUS_INVALID_REQUEST);
    CHECK(result == NULL);
}

static void handles_are_checked(EmberEngine *engine) {
    EmberEmbeddings *live = NULL, *freed = NULL;
    CHECK_STATUS(engine_embed_vectors(engine, "{\"input\": \"a\"}", &live), EMBER_STATUS_OK);
    CHECK_STATUS(engine_embed_vectors(engine, "{\"input\": \"b\"}", &freed), EMBER_STATUS_OK);
    engine_embeddings_free(freed);
    EmberEmbeddings *wrong[] = {freed, (EmberEmbeddings *)(void *)engine, (EmberEmbeddings *)(uintptr_t)0xE3000001u,
                                (EmberEmbeddings *)(uintptr_t)0x1234};
    const float *floats = NULL;
    const uint32_t *tokens = NULL;
    const char *json = NULL;
    size_t n = 0;
    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        CHECK_STATUS(engine_embeddings_floats(wrong[i], &floats), EMBER_STATUS_INVALID_HANDLE);
        CHECK_STATUS(engine_embeddings_count(wrong[i], &n), EMBER_STATUS_INVALID_HANDLE);
        CHECK_STATUS(engine_embeddings_dimensions(wrong[i], &n), EMBER_STATUS_INVALID_HANDLE);
        CHECK_STATUS(engine_embeddings_input_tokens(wrong[i], &tokens), EMBER_STATUS_INVALID_HANDLE);
        CHECK_STATUS(engine_embeddings_json(wrong[i], &json), EMBER_STATUS_INVALID_HANDLE);
        CHECK_STATUS(engine_get_embeddings_timing_metrics(wrong[i], &m), EMBER_STATUS_INVALID_HANDLE);
    }
    CHECK(floats == NULL && tokens == NULL && json == NULL && n == 0);
    CHECK_STATUS(engine_embeddings_floats(NULL, &floats), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_embeddings_count(live, NULL), EMBER_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(engine_get_embeddings_timing_metrics(live, NULL), EMBER_STATUS_INVALID_ARGUMENT);
    /* Wrong frees: a double free, a NULL, another type's free of this handle. None touches the live result. */
    engine_embeddings_free(freed);
    CHECK(last_error_has("not a live embeddings handle"));
    engine_embeddings_free(NULL);
    engine_request_free((EmberRequest *)(void *)live);
    engine_free((EmberEngine *)(void *)live);
    Rows r = rows(live);
    CHECK(r.count == 1 && r.dimensions == 384);
    engine_embeddings_free(live);
}

/* Threads embedding at once: each gets, bit for bit, what one call alone gets. */
typedef struct {
    EmberEngine *engine;
    const float *reference;
    size_t floats;
    int same;
} Worker;

static void *embed_repeatedly(void *arg) {
    Worker *w = arg;
    w->same = 1;
    for (int i = 0; i < 4; i++) {
        EmberEmbeddings *result = NULL;
        if (engine_embed_vectors(w->engine, "{\"input\": " TEXTS "}", &result) != EMBER_STATUS_OK) {
            w->same = 0;
            return NULL;
        }
        const float *floats = NULL;
        engine_embeddings_floats(result, &floats);
        w->same &= memcmp(floats, w->reference, w->floats * sizeof(float)) == 0;
        engine_embeddings_free(result);
    }
    return NULL;
}

static void threads_get_the_same_bits(EmberEngine *engine) {
    EmberEmbeddings *alone = NULL;
    CHECK_STATUS(engine_embed_vectors(engine, "{\"input\": " TEXTS "}", &alone), EMBER_STATUS_OK);
    Rows r = rows(alone);
    Worker workers[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        workers[i] = (Worker){engine, r.floats, r.count * r.dimensions, 0};
        CHECK(pthread_create(&threads[i], NULL, embed_repeatedly, &workers[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        CHECK(workers[i].same);
    }
    engine_embeddings_free(alone);
}

static void rerank_scores_in_document_order(const char *model) {
    EmberEngine *engine = new_engine(model, "");
    EmberEmbeddings *all = NULL, *top = NULL;
#define RERANK "\"query\": \"capital\", \"documents\": [\"Paris\", \"a fox\", \"Berlin\"]"
    CHECK_STATUS(engine_rerank_scores(engine, "{" RERANK "}", &all), EMBER_STATUS_OK);
    CHECK_STATUS(engine_rerank_scores(engine, "{" RERANK ", \"top_n\": 1}", &top), EMBER_STATUS_OK);
    Rows a = rows(all), t = rows(top);
    CHECK(a.count == 3 && a.dimensions == 1 && t.count == 3 && t.dimensions == 1);
    CHECK(memcmp(a.floats, t.floats, 3 * sizeof(float)) == 0);   /* every document's score, whatever top_n */
    size_t best = 0;
    for (size_t i = 1; i < 3; i++)
        if (a.floats[i] > a.floats[best]) best = i;
    CHECK(json_uint(t.json, "index") == best);   /* the body keeps the best one, alone */
    CHECK(strstr(strstr(t.json, "\"index\"") + 1, "\"index\"") == NULL);
    /* A result outlives its engine. */
    engine_free(engine);
    Rows after = rows(all);
    CHECK(after.floats[best] == a.floats[best]);
    engine_embeddings_free(all);
    engine_embeddings_free(top);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s EMBEDDER.gguf RERANKER.gguf\n", argv[0]);
        return 2;
    }
    EmberEngine *engine = new_engine(argv[1], ", \"enable_per_request_metrics\": true");
    vectors_and_their_body(engine);
    refusals_leave_the_output_alone(engine);
    handles_are_checked(engine);
    threads_get_the_same_bits(engine);
    engine_free(engine);
    rerank_scores_in_document_order(argv[2]);
    printf("test_embed: %d checks passed\n", checks_run);
    return 0;
}
