/* What the bench's C drivers (loadgen.c, grpc_receive.c) share: a fatal error, the monotonic
 * clock, and a growable buffer's growth. Define BENCH_PROG (the program's name, for the error's
 * prefix) before including it. Header-only: each driver stays one `cc` command. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs(BENCH_PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* *p (of *cap bytes, *len used) grown, doubling from `first`, to hold `more` bytes past *len */
static void grow(void *p, size_t *cap, size_t len, size_t more, size_t first) {
    void **pp = (void **)p;
    if (len + more <= *cap) return;
    size_t c = *cap ? *cap : first;
    while (c < len + more) c *= 2;
    if (!(*pp = realloc(*pp, c))) die("out of memory");
    *cap = c;
}

#endif
