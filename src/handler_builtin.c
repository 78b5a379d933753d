/* handler_builtin.c: see handler_builtin.h. sleep waits on an evtimer so it never blocks
 * the loop. */
#include "handler_builtin.h"

#include <cjson/cJSON.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static void builtin_noop(dtq_handler_call *call) {
    call->complete(call, DTQ_HANDLER_OK, NULL, 0, NULL);
}

static void builtin_echo(dtq_handler_call *call) {
    call->complete(call, DTQ_HANDLER_OK, call->payload, call->payload_len, NULL);
}

/* Reads a payload object; NULL (and a permanent failure reported) when it is not one. */
static cJSON *payload_object(dtq_handler_call *call) {
    cJSON *p = cJSON_ParseWithLength(call->payload, call->payload_len);
    if (!p || !cJSON_IsObject(p)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "invalid payload: %s expects a JSON object", call->config);
        cJSON_Delete(p);
        call->complete(call, DTQ_HANDLER_FAIL, NULL, 0, msg);
        return NULL;
    }
    return p;
}

static void sleep_done_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_handler_call *call = arg;
    DTQ_UNUSED(fd);
    DTQ_UNUSED(what);
    event_free(call->handler_data);
    call->handler_data = NULL;
    call->complete(call, DTQ_HANDLER_OK, NULL, 0, NULL);
}

static void sleep_cancel(dtq_handler_call *call) {
    if (call->handler_data) event_free(call->handler_data);
    call->handler_data = NULL;
}

static void builtin_sleep(dtq_handler_call *call) {
    cJSON *p = payload_object(call), *ms;
    struct timeval tv;
    double v;
    if (!p) return;
    ms = cJSON_GetObjectItemCaseSensitive(p, "ms");
    if (!cJSON_IsNumber(ms) || ms->valuedouble < 0 || ms->valuedouble > 86400000.0) {
        cJSON_Delete(p);
        call->complete(call, DTQ_HANDLER_FAIL, NULL, 0,
                       "invalid payload: sleep expects {\"ms\": 0..86400000}");
        return;
    }
    v = ms->valuedouble;
    cJSON_Delete(p);
    tv.tv_sec = (long)(v / 1000);
    tv.tv_usec = (long)((long long)v % 1000) * 1000;
    call->handler_data = evtimer_new(call->base, sleep_done_cb, call);
    call->cancel = sleep_cancel;
    evtimer_add(call->handler_data, &tv);
}

static void builtin_fail(dtq_handler_call *call) {
    cJSON *p = payload_object(call), *retry, *msg;
    char *text;
    int retryable;
    if (!p) return;
    retry = cJSON_GetObjectItemCaseSensitive(p, "retryable");
    msg = cJSON_GetObjectItemCaseSensitive(p, "message");
    retryable = cJSON_IsTrue(retry);
    text = dtq_xstrdup(cJSON_IsString(msg) ? msg->valuestring : "fail builtin");
    cJSON_Delete(p);
    call->complete(call, retryable ? DTQ_HANDLER_RETRY : DTQ_HANDLER_FAIL, NULL, 0, text);
    free(text);
}

static void builtin_flaky(dtq_handler_call *call) {
    cJSON *p = payload_object(call), *on;
    long long succeed_on;
    char buf[96];
    if (!p) return;
    on = cJSON_GetObjectItemCaseSensitive(p, "succeed_on");
    if (!cJSON_IsNumber(on) || on->valuedouble < 1) {
        cJSON_Delete(p);
        call->complete(call, DTQ_HANDLER_FAIL, NULL, 0,
                       "invalid payload: flaky expects {\"succeed_on\": N >= 1}");
        return;
    }
    succeed_on = (long long)on->valuedouble;
    cJSON_Delete(p);
    if (call->attempt < succeed_on) {
        snprintf(buf, sizeof(buf), "flaky: attempt %lld of %lld fails", call->attempt, succeed_on);
        call->complete(call, DTQ_HANDLER_RETRY, NULL, 0, buf);
        return;
    }
    snprintf(buf, sizeof(buf), "{\"succeeded_on\":%lld}", call->attempt);
    call->complete(call, DTQ_HANDLER_OK, buf, strlen(buf), NULL);
}

dtq_handler_fn *dtq_handler_builtin(const char *name) {
    if (!strcmp(name, "noop")) return builtin_noop;
    if (!strcmp(name, "echo")) return builtin_echo;
    if (!strcmp(name, "sleep")) return builtin_sleep;
    if (!strcmp(name, "fail")) return builtin_fail;
    if (!strcmp(name, "flaky")) return builtin_flaky;
    return NULL;
}
