/* fuzz_web_host: dtq-web's Host check (against DNS rebinding): [web] listen and
 * allowed_hosts through dtq_web_hosts_new, then a request's Host value through
 * dtq_web_hosts_check. Input: listen NUL allowed_hosts NUL host. */
#include "fuzz.h"
#include "web_auth.h"

DTQ_FUZZ_QUIET_LOGS()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *part[3], err[256];
    dtq_web_hosts *h;
    fuzz_split(data, size, part, 3);
    h = dtq_web_hosts_new(part[0], part[1], err, sizeof(err));
    if (h) {
        int ok = dtq_web_hosts_check(h, part[2]);
        if (dtq_web_hosts_any(h) && !ok) abort();
        /* localhost is always dtq-web, whatever the case, with no port */
        if (!dtq_web_hosts_check(h, "LocalHost")) abort();
        if (!*part[2] && ok && !dtq_web_hosts_any(h)) abort(); /* an empty Host names nothing */
        dtq_web_hosts_free(h);
    } else if (!*err) {
        abort();
    }
    for (int i = 0; i < 3; i++) free(part[i]);
    return 0;
}
