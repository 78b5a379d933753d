/* fuzz.h: what the libFuzzer targets of tests/fuzz share (header-only, static). Each
 * target is one fuzz_<name>.c with LLVMFuzzerTestOneInput; scripts/fuzz builds and runs
 * them (CMake option DTQ_FUZZ, clang). */
#ifndef DTQ_FUZZ_H
#define DTQ_FUZZ_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The targets log through log.c like the daemon; only errors are written, so a run is not
 * slowed down by its own warnings. */
#define DTQ_FUZZ_QUIET_LOGS()                                                                      \
    int LLVMFuzzerInitialize(int *argc, char ***argv) {                                            \
        (void)argc;                                                                                \
        (void)argv;                                                                                \
        dtq_log_setup(DTQ_LOG_ERROR, DTQ_LOG_TEXT);                                                \
        return 0;                                                                                  \
    }

/* The input as a NUL-terminated string (caller-owned). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Splits the input at its first NUL bytes into up to n strings (caller-owned, each
 * NUL-terminated; missing parts are empty). */
static inline void fuzz_split(const uint8_t *data, size_t size, char **out, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *end = off < size ? memchr(data + off, '\0', size - off) : NULL;
        size_t len = i == n - 1 || !end ? size - off : (size_t)(end - (data + off));
        out[i] = fuzz_cstr(data + off, len);
        off += len + (off + len < size);
    }
}

/* hiredis allocates an array's element table when its header arrives ("*1000000000" is
 * 8 GB at once, before any element): that is hiredis's, not what the targets test, so
 * inputs with an array header above this are skipped (a line "*N" anywhere). */
#define FUZZ_RESP_MAX_ELEMENTS 4096

static inline int fuzz_resp_small(const uint8_t *data, size_t size) {
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*' || (i > 0 && data[i - 1] != '\n')) continue;
        size_t n = 0, j = i + 1;
        if (j < size && data[j] == '-') continue;
        for (; j < size && data[j] >= '0' && data[j] <= '9'; j++)
            if ((n = n * 10 + (size_t)(data[j] - '0')) > FUZZ_RESP_MAX_ELEMENTS) return 0;
    }
    return 1;
}

/* Reads the input as RESP, as a Redis reply reaches the daemon: hiredis's own reader
 * builds the redisReply trees, so what a target sees is what a callback can be given.
 * Calls fn for every whole reply; stops at the first protocol error. */
static inline void fuzz_each_reply(const uint8_t *data, size_t size,
                                   void (*fn)(const redisReply *r, void *arg), void *arg) {
    redisReader *rd;
    void *reply = NULL;
    if (!fuzz_resp_small(data, size)) return;
    rd = redisReaderCreate();
    if (!rd) abort();
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
            fn(reply, arg);
            freeReplyObject(reply);
            reply = NULL;
        }
    }
    redisReaderFree(rd);
}

#endif
