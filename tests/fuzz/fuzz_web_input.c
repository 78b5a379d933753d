/* fuzz_web_input: what dtq-web reads of a request besides its head and Host: the path
 * (dtq_web_split_path, the router's decoding), the query string (libevent's
 * evhttp_parse_query_str, then the integer parameters the reads take), and a write's JSON
 * body (dtq_web_parse_body, then the bulk writes' ids). Input: path NUL query NUL body. */
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "fuzz.h"
#include "web_api.h"

DTQ_FUZZ_QUIET_LOGS()

#define SEGMENTS 6

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *part[3], *seg[SEGMENTS];
    struct evkeyvalq query;
    cJSON *body = NULL;
    const char *why = NULL;
    int n, rc;
    fuzz_split(data, size, part, 3);
    n = dtq_web_split_path(part[0], seg, SEGMENTS);
    if (n > SEGMENTS || n < -2) abort();
    for (int i = 0; i < n; i++) {
        if (strlen(seg[i]) > strlen(part[0])) abort(); /* decoding never grows a segment */
        free(seg[i]);
    }
    query.tqh_first = NULL; /* TAILQ_INIT, which libevent's headers do not define */
    query.tqh_last = &query.tqh_first;
    if (evhttp_parse_query_str(part[1], &query) == 0) {
        static const char *const names[] = {"count", "cursor", "backlog", "limit"};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            int64_t v = -1;
            if (dtq_web_query_int_value(evhttp_find_header(&query, names[i]), 20, 1, 500, &v) ==
                    0 &&
                (v < 1 || v > 500))
                abort(); /* an accepted value is within its bounds */
        }
    }
    evhttp_clear_headers(&query);
    rc = dtq_web_parse_body(part[2], strlen(part[2]), &body, &why);
    if (rc == 0) {
        if (body && !cJSON_IsObject(body)) abort();
        n = dtq_web_body_ids(body, 500);
        if (n == 0 || n > 500) abort();
        cJSON_Delete(body);
    } else if (!why || body) {
        abort();
    }
    for (int i = 0; i < 3; i++) free(part[i]);
    return 0;
}
