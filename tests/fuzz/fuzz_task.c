/* fuzz_task: the claim replies of the fetch, reap and recover Functions, read as RESP by
 * hiredis: the shape checks of whole fetch and reap replies (dtq_fetch_reply_ok,
 * dtq_reap_reply_ok) and what consumer.c and reaper.c then read of a reply that passes,
 * and every claimed-task array decoded with dtq_task_from_reply: the reply taken whole,
 * each of its elements and theirs (a claimed task inside a fetch or reap reply); a fetch
 * reply's lean-claims and full-claims through their decoders (executor.c). */
#include "fuzz.h"
#include "task.h"
#include "util.h"

DTQ_FUZZ_QUIET_LOGS()

static void decode(const redisReply *r) {
    char err[128];
    dtq_task *t = dtq_task_from_reply(r, err, sizeof(err));
    if (!t) {
        if (!*err) abort();
        return;
    }
    if (!t->stream || !t->entry_id || !t->id || !t->queue || !t->task_type || !t->payload) abort();
    if (t->payload[t->payload_len] != '\0') abort();
    /* what the executor relies on (its timer, DTQ_ATTEMPT): the Functions' own bounds */
    if (t->attempt < 1 || t->max_attempts < 1 || t->max_attempts > 1000 || t->timeout_ms < 1 ||
        t->timeout_ms > ((int64_t)1 << 53) || t->attempt > ((int64_t)1 << 53))
        abort();
    dtq_task_free(t);
}

static void drop(dtq_task *t, void *arg) {
    (void)arg;
    dtq_task_free(t);
}

static void each(const redisReply *r, void *arg) {
    (void)arg;
    if (dtq_fetch_reply_ok(r)) { /* consumer.c: fetch_cb, start_block */
        const redisReply *block = r->element[1];
        size_t bytes = 0;
        for (size_t i = 0; i < block->elements; i++) bytes += strlen(block->element[i]->str);
        (void)bytes;
        (void)r->element[2]->integer;
        if (r->elements > 3) {
            char err[128];
            (void)dtq_lean_claims_decode(r->element[3], drop, NULL, err, sizeof(err));
            if (r->elements > 4)
                (void)dtq_full_claims_decode(r->element[4], drop, NULL, err, sizeof(err));
        }
    }
    if (dtq_reap_reply_ok(r)) /* reaper.c: reap_cb, save_cursors */
        (void)r->element[0]->elements;
    decode(r);
    if (r->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i < r->elements; i++) {
        decode(r->element[i]);
        if (r->element[i]->type == REDIS_REPLY_ARRAY)
            for (size_t j = 0; j < r->element[i]->elements; j++) decode(r->element[i]->element[j]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_each_reply(data, size, each, NULL);
    return 0;
}
