/* finish_record.c: the finish and hand-back records' encoders (see finish_record.h). */
#include "finish_record.h"

#include <stdlib.h>

void dtq_finish_record_encode(dtq_argv *a, const dtq_finish_record *rec) {
    int has_result = rec->result_state != DTQ_RESULT_NONE && rec->result;
    dtq_argv_adds(a, rec->task_id);
    dtq_argv_addll(a, rec->attempt);
    dtq_argv_adds(a, dtq_outcome_kind_name(rec->outcome));
    dtq_argv_adds(a, rec->stream);
    dtq_argv_adds(a, rec->entry_id);
    dtq_argv_add(a, has_result ? rec->result : "", has_result ? rec->result_len : 0);
    dtq_argv_adds(a, dtq_result_state_name(rec->result_state));
    dtq_argv_adds(a, rec->error ? rec->error : "");
    dtq_argv_adds(a, rec->error_class ? rec->error_class : "");
    dtq_argv_addll(a, rec->delay_ms);
    dtq_argv_addll(a, rec->grace_ms);
}

void dtq_finish_lean_head(dtq_argv *a, const char *policy_json, int m) {
    dtq_argv_adds(a, "lean");
    dtq_argv_adds(a, policy_json);
    dtq_argv_addll(a, m);
}

void dtq_finish_lean_encode(dtq_argv *a, const char *stream, const char *entry_id,
                            const char *task_type, int64_t attempt) {
    dtq_argv_adds(a, stream);
    dtq_argv_adds(a, entry_id);
    dtq_argv_adds(a, task_type);
    dtq_argv_addll(a, attempt);
}

void dtq_handback_record_encode(dtq_argv *a, const dtq_finish_record *rec) {
    dtq_argv_adds(a, rec->task_id);
    dtq_argv_addll(a, rec->attempt);
    dtq_argv_adds(a, rec->stream);
    dtq_argv_adds(a, rec->entry_id);
    dtq_argv_adds(a, rec->error ? rec->error : "");
}

void dtq_finish_record_free(dtq_finish_record *rec) {
    if (!rec) return;
    free(rec->task_id);
    free(rec->stream);
    free(rec->entry_id);
    free(rec->result);
    free(rec->error);
    dtq_task_free(rec->task);
    free(rec);
}
