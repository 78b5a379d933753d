/* fuzz_redis_proto: what a server or a sentinel answers while the daemon reaches Redis,
 * read as RESP by hiredis: every reply checked as the answer of each handshake step
 * (dtq_handshake_check), as a sentinel's answer to get-master-addr-by-name
 * (dtq_sentinel_answer) and as a +switch-master message (dtq_sentinel_switch_parse). */
#include <stdio.h>

#include "fuzz.h"
#include "redis_proto.h"
#include "util.h"

DTQ_FUZZ_QUIET_LOGS()

static void each(const redisReply *r, void *arg) {
    static const dtq_hs_kind kinds[] = {DTQ_HS_AUTH, DTQ_HS_ROLE, DTQ_HS_SELECT, DTQ_HS_SETNAME,
                                        DTQ_HS_PING};
    char why[256], *host;
    int port;
    dtq_sentinel_switch sw;
    (void)arg;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        why[0] = '\0';
        int rc = dtq_handshake_check(kinds[i], r, why, sizeof(why));
        if (rc != DTQ_HS_OK && !*why && !(r->type == REDIS_REPLY_ERROR && !*r->str)) abort();
    }
    switch (dtq_sentinel_answer(r, &host, &port, why, sizeof(why))) {
    case DTQ_SENTINEL_ADDR:
        if (!host || !*host || port < 1 || port > 65535) abort();
        free(host);
        break;
    case DTQ_SENTINEL_UNKNOWN:
    case DTQ_SENTINEL_BAD:
        if (host) abort();
        break;
    default: abort();
    }
    if (dtq_sentinel_switch_parse(r, &sw) == 0) {
        if (!*sw.master || !*sw.new_host || sw.new_port < 1 || sw.new_port > 65535 ||
            sw.old_port < 1 || sw.old_port > 65535)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_each_reply(data, size, each, NULL);
    return 0;
}
