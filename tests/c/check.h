/*
 * CHECK and CHECK_STATUS for the C tests: a failed check prints where, what, and ember's last error message, and
 * exits 1. checks_run counts the checks made (the tests print it at the end).
 */
#ifndef EMBER_TEST_CHECK_H
#define EMBER_TEST_CHECK_H

#include "ember.h"

#include <stdio.h>
#include <stdlib.h>

static int checks_run = 0;

#define CHECK(cond) check((cond), #cond, __FILE__, __LINE__)
#define CHECK_STATUS(call, expected) check_status((call), (expected), #call, __FILE__, __LINE__)

static void check(int ok, const char *what, const char *file, int line) {
    checks_run++;
    if (!ok) {
        fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n", file, line, what, engine_last_error_message());
        exit(1);
    }
}

static void check_status(EmberStatus got, EmberStatus expected, const char *call, const char *file, int line) {
    checks_run++;
    if (got != expected) {
        fprintf(stderr, "%s:%d: %s\n  returned %u (%s), expected %u (%s)\n  last error: %s\n", file, line, call,
                (unsigned)got, engine_status_message(got), (unsigned)expected, engine_status_message(expected),
                engine_last_error_message());
        exit(1);
    }
}

#endif /* EMBER_TEST_CHECK_H */
