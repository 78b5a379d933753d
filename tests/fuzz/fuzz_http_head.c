/* fuzz_http_head: the request head the daemon's HTTP endpoint reads ([http] listen),
 * line by line with libevent's evbuffer_readln as read_cb does (empty lines before the
 * request line, the head limit), each request line through dtq_http_parse_request_line and
 * its target through dtq_http_target_path. */
#include <event2/buffer.h>

#include "fuzz.h"
#include "http.h"
#include "util.h"

DTQ_FUZZ_QUIET_LOGS()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct evbuffer *in = evbuffer_new();
    char *line, *method = NULL, *target = NULL;
    size_t n, head_bytes = 0;
    evbuffer_add(in, data, size);
    while ((line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF)) != NULL) {
        int bad = 0, end = n == 0 && method;
        head_bytes += n + 2;
        if (head_bytes <= DTQ_HTTP_MAX_HEAD && !method && n > 0)
            bad = dtq_http_parse_request_line(line, &method, &target) != DTQ_OK;
        free(line);
        if (head_bytes > DTQ_HTTP_MAX_HEAD || bad) break;
        if (end) {
            const char *path = dtq_http_target_path(target);
            if (!path) abort();
            if (strchr(path, '?') || strchr(path, '#')) abort(); /* the query is cut off */
            break;
        }
    }
    free(method);
    free(target);
    evbuffer_free(in);
    return 0;
}
