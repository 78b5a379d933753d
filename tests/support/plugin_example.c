/* plugin_example.c: a handler plugin built against include/dtq/handler.h, used by the
 * tests and as the example for plugin authors. `upper` returns {"len": N, "attempt": A};
 * `later` completes asynchronously from a timer on the daemon's loop. */
#include <dtq/handler.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

void dtq_example_upper(dtq_handler_call *call);
void dtq_example_later(dtq_handler_call *call);

void dtq_example_upper(dtq_handler_call *call) {
    char out[96];
    if (call->abi_version != DTQ_HANDLER_ABI_VERSION) {
        call->complete(call, DTQ_HANDLER_FAIL, NULL, 0, "ABI version mismatch");
        return;
    }
    if (call->payload_len > 0 && call->payload[0] == '"' && strstr(call->payload, "retry")) {
        call->complete(call, DTQ_HANDLER_RETRY, NULL, 0, "plugin asked for a retry");
        return;
    }
    snprintf(out, sizeof(out), "{\"len\":%zu,\"attempt\":%lld}", call->payload_len, call->attempt);
    call->complete(call, DTQ_HANDLER_OK, out, strlen(out), NULL);
}

static void later_cb(evutil_socket_t fd, short what, void *arg) {
    dtq_handler_call *call = arg;
    (void)fd;
    (void)what;
    event_free(call->handler_data);
    call->handler_data = NULL;
    call->complete(call, DTQ_HANDLER_OK, "\"later\"", 7, NULL);
}

static void later_cancel(dtq_handler_call *call) {
    if (call->handler_data) event_free(call->handler_data);
    call->handler_data = NULL;
}

void dtq_example_later(dtq_handler_call *call) {
    struct timeval tv = {0, 50000};
    call->handler_data = evtimer_new(call->base, later_cb, call);
    call->cancel = later_cancel;
    evtimer_add(call->handler_data, &tv);
}
