/* fuzz_exec_result: an exec program's stdout as the result of its attempt, from the bytes
 * the daemon kept (handler_exec.c: at most result_max_bytes, flagged when cut) through the
 * decision (dtq_outcome_decide: JSON or bad_result, the cut) to the finish record the
 * executor builds and encodes. The first two bytes pick the exit (0 or a cut output), the
 * handler's `result` mode (json, text, ignore) and result_max_bytes; the rest is stdout. */
#include <cjson/cJSON.h>

#include "finisher.h"
#include "fuzz.h"
#include "handler_exec.h"
#include "outcome.h"
#include "util.h"

DTQ_FUZZ_QUIET_LOGS()

/* A whole JSON text, as RFC 8259 reads one: a value and nothing but blanks after it. */
static int whole_json(const char *s, size_t len) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
    int ok = j != NULL;
    cJSON_Delete(j);
    if (!ok) return 0;
    for (; end < s + len; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dtq_retry_policy retry = {0};
    dtq_outcome_limits lim = {&retry, 0, 256, 0, 0};
    dtq_attempt_end end = {0};
    dtq_outcome o;
    dtq_finish_record rec = {0};
    dtq_argv a;
    static char ids[3][4] = {"t", "s", "1-0"};
    char *out;
    size_t len;
    if (size < 2) return 0;
    end.status = data[0] & 1 ? DTQ_HANDLER_OK_TRUNCATED : DTQ_HANDLER_OK;
    end.handler_known = 1;
    end.attempt = 1;
    end.max_attempts = 3;
    end.result_mode = (enum dtq_result_mode)((data[0] >> 1) % 3);
    lim.result_max_bytes = data[1] == 255 ? 65536 : data[1];
    /* what read_stdout keeps: at most result_max_bytes, NUL-terminated */
    len = size - 2;
    if ((int64_t)len > lim.result_max_bytes) {
        len = (size_t)lim.result_max_bytes;
        end.status = DTQ_HANDLER_OK_TRUNCATED;
    }
    out = len ? fuzz_cstr(data + 2, len) : NULL;
    end.result = out;
    end.result_len = len;
    dtq_outcome_decide(&end, &lim, 0.5, &o);
    if ((int64_t)o.result_len > lim.result_max_bytes) abort();
    if (o.result_state != DTQ_RESULT_NONE && o.kind != DTQ_OUTCOME_SUCCEEDED) abort();
    if (o.result_state == DTQ_RESULT_FULL && !whole_json(o.result ? o.result : out, o.result_len))
        abort(); /* recorded as a JSON result, but it is not one */
    if (end.result_mode == DTQ_RESULT_MODE_TEXT && o.result_state != DTQ_RESULT_NONE &&
        o.result_len > 0 && /* result_max_bytes below 2: cut to nothing */
        (!o.result || o.result[0] != '"' || !whole_json(o.result, o.result_len)))
        abort(); /* text is recorded as one JSON string, cut or not */
    if (end.result_mode == DTQ_RESULT_MODE_IGNORE && o.result_state != DTQ_RESULT_NONE)
        abort(); /* ignore keeps nothing */
    if (end.result_mode == DTQ_RESULT_MODE_JSON && end.status == DTQ_HANDLER_OK && len &&
        o.kind == DTQ_OUTCOME_SUCCEEDED && o.result_state == DTQ_RESULT_NONE &&
        !whole_json(out, len))
        abort(); /* a success without a result: stdout was JSON null */
    /* the executor's record (executor.c run_end) */
    rec.task_id = ids[0];
    rec.attempt = 1;
    rec.stream = ids[1];
    rec.entry_id = ids[2];
    rec.outcome = o.kind;
    rec.result_state = o.result_state;
    if (o.result_state != DTQ_RESULT_NONE) {
        rec.result = dtq_xstrndup(o.result ? o.result : out ? out : "", o.result_len);
        rec.result_len = o.result_len;
    }
    rec.error = o.error;
    rec.error_class = o.error_class;
    dtq_argv_init(&a);
    dtq_finish_record_encode(&a, &rec);
    if (a.argc != DTQ_FINISH_RECORD_FIELDS || a.lens[5] != rec.result_len) abort();
    dtq_argv_deinit(&a);
    free(rec.result);
    dtq_outcome_deinit(&o);
    free(out);
    return 0;
}
