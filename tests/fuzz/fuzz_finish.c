/* fuzz_finish: the replies to finish and hand-back batches (a verdict per record, read as
 * tasklog.c reads them), read as RESP by hiredis, against a batch of four records (finishes and
 * hand-backs); and the records' encoding (dtq_finish_record_encode, the C side of
 * lua/fn/finish.lua's decode_finish_record) with the reply's bytes as task id, result and error. */
#include "finisher.h"
#include "fuzz.h"
#include "metrics.h"
#include "util.h"

DTQ_FUZZ_QUIET_LOGS()

static void each(const redisReply *r, void *arg) {
    dtq_finish_record *list = arg;
    /* the verdicts, as tasklog.c reads them (a word per record, for finishes and hand-backs) */
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements && list; i++, list = list->next)
            if (r->element[i]->type == REDIS_REPLY_STRING)
                (void)dtq_metric_outcome_from_verdict(r->element[i]->str, list->handback);
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
        r->type == REDIS_REPLY_ERROR) {
        dtq_finish_record rec = {0};
        dtq_argv a;
        rec.task_id = r->str;
        rec.attempt = (int64_t)r->len;
        rec.stream = r->str;
        rec.entry_id = r->str;
        rec.outcome = (enum dtq_outcome_kind)(r->len % 4);
        rec.result_state = (enum dtq_result_state)(r->len % 3);
        rec.result = r->str;
        rec.result_len = r->len;
        rec.error = r->str;
        rec.error_class = "handler";
        dtq_argv_init(&a);
        dtq_finish_record_encode(&a, &rec);
        if (a.argc != DTQ_FINISH_RECORD_FIELDS) abort();
        if (rec.result_state != DTQ_RESULT_NONE &&
            (a.lens[5] != r->len || memcmp(a.argv[5], r->str, r->len)))
            abort(); /* the result goes out byte for byte, NUL bytes included */
        dtq_argv_deinit(&a);
        dtq_argv_init(&a);
        dtq_handback_record_encode(&a, &rec);
        if (a.argc != 5) abort();
        dtq_argv_deinit(&a);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char task_id[] = "t";
    dtq_finish_record recs[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        recs[i].next = i < 3 ? &recs[i + 1] : NULL;
        recs[i].handback = i % 2;
        recs[i].task_id = task_id;
        recs[i].attempt = i + 1;
    }
    fuzz_each_reply(data, size, each, recs);
    return 0;
}
