/* LD_PRELOAD for redis-server that takes chance and the wall clock out of its
 * instruction counts (benchmarks.ir_ab.shim compiles it at run time):
 * - /dev/urandom is read from $IR_AB_SEED_FILE: the dict hash seed (command lookups,
 *   key hashing) and the run id are the same at every start;
 * - srand/srandom get a fixed seed: skiplist levels (zsets) repeat;
 * - with $IR_AB_TIME_STEP_US set, gettimeofday/time are a virtual wall clock from a
 *   fixed epoch that moves that many microseconds per TIME command and stands still
 *   otherwise: what crawlq's Lua reads from TIME, and its work done once per second
 *   of server time, depend on the command stream only. The monotonic clock (event
 *   loop, timers, durations) stays real. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static const char *redirect(const char *path) {
    const char *seed = getenv("IR_AB_SEED_FILE");
    if (path && seed && strcmp(path, "/dev/urandom") == 0) return seed;
    return path;
}

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    if (!real) real = (FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen");
    return real(redirect(path), mode);
}

FILE *fopen64(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    if (!real) real = (FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen64");
    return real(redirect(path), mode);
}

void srand(unsigned int seed) {
    static void (*real)(unsigned int);
    (void)seed;
    if (!real) real = (void (*)(unsigned int))dlsym(RTLD_NEXT, "srand");
    real(1);
}

void srandom(unsigned int seed) {
    static void (*real)(unsigned int);
    (void)seed;
    if (!real) real = (void (*)(unsigned int))dlsym(RTLD_NEXT, "srandom");
    real(1);
}

static long long step_us = -1;
static unsigned long long ticks;  /* TIME commands run so far */

/* Is `ra` (a return address) inside timeCommand? Its bounds are looked up once
 * (redis-server exports its symbols: -rdynamic); without them every reading moves. */
static int from_time_command(void *ra) {
    static char *start, *end;
    static int looked;
    if (!looked) {
        looked = 1;
        start = (char *)dlsym(RTLD_DEFAULT, "timeCommand");
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        if (start && dladdr1(start, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size)
            end = start + sym->st_size;
        else
            start = NULL;
    }
    if (start == NULL) return 1;
    return (char *)ra >= start && (char *)ra < end;
}

/* The virtual wall clock in us, or -1 for the real one. It moves by step_us at each
 * TIME command (crawlq's functions read the clock once per call that needs it), and
 * stands still otherwise: idle wake-ups and cron ticks read it without moving it. */
static long long virtual_us(void *ra) {
    if (step_us < 0) {
        const char *step = getenv("IR_AB_TIME_STEP_US");
        step_us = step ? atoll(step) : 0;
    }
    if (step_us == 0) return -1;
    if (from_time_command(ra)) ticks++;
    return 1750000000000000LL + (long long)ticks * step_us;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    static int (*real)(struct timeval *restrict, void *restrict);
    long long us = virtual_us(__builtin_return_address(0));
    if (us < 0 || tv == NULL) {
        if (!real) real = (int (*)(struct timeval *restrict, void *restrict))dlsym(RTLD_NEXT, "gettimeofday");
        return real(tv, tz);
    }
    tv->tv_sec = us / 1000000;
    tv->tv_usec = us % 1000000;
    return 0;
}

time_t time(time_t *out) {
    static time_t (*real)(time_t *);
    long long us = virtual_us(__builtin_return_address(0));
    if (us < 0) {
        if (!real) real = (time_t (*)(time_t *))dlsym(RTLD_NEXT, "time");
        return real(out);
    }
    if (out) *out = us / 1000000;
    return us / 1000000;
}
