// A minimal test harness: each test binary runs named test functions with
// RUN(), checks with CHECK()/CHECK_CLOSE(), and ends with check_finish(),
// which prints "<binary>: N passed, N failed" and returns the exit status.
#ifndef SC_TESTS_CHECK_H
#define SC_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *suite;
    const char *test;
    int passed, failed, skipped;
    int bad;      // the current test failed
    int skip;     // the current test asked to be skipped
    const char *only;  // when set, only the tests whose names contain it run
} tctx;

// Fails the current test with a message when cond is false (keeps running).
#define CHECK(t, cond, ...)                                                              \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "  FAIL %s:%d (%s) %s: ", __FILE__, __LINE__, (t)->test, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            (t)->bad = 1;                                                                \
        }                                                                                \
    } while (0)

// Checks |a - b| <= tol * max(1, |b|).
#define CHECK_CLOSE(t, a, b, tol)                                                        \
    CHECK(t, fabs((double)(a) - (double)(b)) <= (tol) * fmax(1.0, fabs((double)(b))),     \
          "%.9g vs %.9g (tol %g)", (double)(a), (double)(b), (double)(tol))

// Marks the current test as skipped (e.g. no GPU) with a reason.
#define SKIP(t, ...)                                                                     \
    do {                                                                                 \
        printf("  skip %s: ", (t)->test);                                                \
        printf(__VA_ARGS__);                                                             \
        printf("\n");                                                                    \
        (t)->skip = 1;                                                                   \
    } while (0)

// Runs one test function void fn(tctx *).
#define RUN(t, fn)                                                                       \
    do {                                                                                 \
        if ((t)->only && !strstr(#fn, (t)->only)) break;                                 \
        (t)->test = #fn;                                                                 \
        (t)->bad = 0;                                                                    \
        (t)->skip = 0;                                                                   \
        fn(t);                                                                           \
        if ((t)->skip && !(t)->bad) {                                                    \
            (t)->skipped++;                                                              \
        } else if ((t)->bad) {                                                           \
            (t)->failed++;                                                               \
            printf("FAIL %s\n", #fn);                                                    \
        } else {                                                                         \
            (t)->passed++;                                                               \
            printf("ok   %s\n", #fn);                                                    \
        }                                                                                \
        fflush(stdout);                                                                  \
    } while (0)

// Prints the summary line and returns 0 when nothing failed, else 1.
static inline int check_finish(tctx *t) {
    printf("%s: %d passed, %d failed, %d skipped\n", t->suite, t->passed, t->failed,
           t->skipped);
    return t->failed ? 1 : 0;
}

#endif
