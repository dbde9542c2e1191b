/*
 * ember's embeddings from C: embed texts with engine_embed_vectors, read the vectors in place (no JSON to parse),
 * print each text's cosine similarity to the first, the tokens of each, and the call's timing metrics.
 *
 * Build: make c-examples      Run: target/c/embed MODEL.gguf "first text" "second text" ...
 * MODEL is an encoder (bge-small, nomic-embed-text, ...: docs/embeddings.md). The texts must fit a JSON string
 * without escaping (no quotes or backslashes), to keep the example short.
 */
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *call, EmberStatus status) {
    fprintf(stderr, "%s failed: %s\n  %s\n", call, engine_status_message(status), engine_last_error_message());
    exit(1);
}

/* The dot product of two rows of `dimensions` floats: their cosine, since the vectors are unit length. */
static double dot(const float *a, const float *b, size_t dimensions) {
    double sum = 0;
    for (size_t i = 0; i < dimensions; i++) sum += (double)a[i] * b[i];
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf TEXT...\n", argv[0]);
        return 2;
    }
    char config[4096], request[16384];
    snprintf(config, sizeof config, "{\"model\": \"%s\", \"threads\": 2}", argv[1]);
    size_t n = (size_t)snprintf(request, sizeof request, "{\"input\": [");
    for (int i = 2; i < argc; i++) {
        if (strpbrk(argv[i], "\"\\") != NULL || n + strlen(argv[i]) + 8 > sizeof request) {
            fprintf(stderr, "text %d: too long, or has a quote or a backslash\n", i - 1);
            return 2;
        }
        n += (size_t)snprintf(request + n, sizeof request - n, "%s\"%s\"", i > 2 ? ", " : "", argv[i]);
    }
    snprintf(request + n, sizeof request - n, "]}");

    EmberEngine *engine = NULL;
    EmberStatus status = engine_new(config, &engine);
    if (status != EMBER_STATUS_OK) die("engine_new", status);

    EmberEmbeddings *result = NULL;
    status = engine_embed_vectors(engine, request, &result);
    if (status != EMBER_STATUS_OK) die("engine_embed_vectors", status);   /* the message names the field */

    const float *floats = NULL;   /* count x dimensions, row-major, owned by the result */
    const uint32_t *tokens = NULL;
    size_t count = 0, dimensions = 0;
    engine_embeddings_floats(result, &floats);
    engine_embeddings_count(result, &count);
    engine_embeddings_dimensions(result, &dimensions);
    engine_embeddings_input_tokens(result, &tokens);
    printf("%zu vectors of %zu floats\n", count, dimensions);
    for (size_t i = 0; i < count; i++)
        printf("  %-40.40s %3u tokens, cosine to the first %+.4f\n", argv[2 + i], tokens[i],
               dot(floats, floats + i * dimensions, dimensions));

    EmberPerRequestTimingMetrics m = {.struct_size = sizeof m};
    if (engine_get_embeddings_timing_metrics(result, &m) == EMBER_STATUS_OK &&
        (m.present & EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS))
        printf("vectors in %.2f ms after %.2f ms queued, %.0f tokens/s\n", m.time_to_first_token_ms,
               m.queue_time_ms, m.tokens_per_second);

    engine_embeddings_free(result);   /* the floats, counts and body go with it */
    engine_free(engine);
    return 0;
}
