/* fuzz_redis_url: a Redis URL ([redis] url, dtqctl's and dtq-web's --url; redis-cluster://
 * too: seeds, no host) through
 * dtq_redis_url_parse, and what is done with a parsed one (copy, where, the handshake
 * plan); also the host:port splitter of [http] and [web] listen. */
#include <stdio.h>

#include "fuzz.h"
#include "redis_proto.h"
#include "redis_url.h"
#include "util.h"

DTQ_FUZZ_QUIET_LOGS()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size), err[256], where[512];
    dtq_redis_url u, copy;
    char *host;
    int port;
    if (dtq_redis_url_parse(s, &u, err, sizeof(err)) == 0) {
        dtq_handshake h;
        dtq_hs_opts o = {1, "fuzz", 1};
        if (u.port < 0 || u.port > 65535 || u.db < 0) abort();
        if (u.sentinel  ? (u.nsentinels < 1 || !u.master_name)
            : u.cluster ? (u.nseeds < 1 || u.db != 0)
                        : (!u.is_unix && !u.host))
            abort();
        for (int i = 0; i < u.nsentinels; i++)
            if (u.sentinels[i].port < 1 || u.sentinels[i].port > 65535) abort();
        for (int i = 0; i < u.nseeds; i++)
            if (!u.seeds[i].host || u.seeds[i].port < 1 || u.seeds[i].port > 65535) abort();
        dtq_redis_url_copy(&copy, &u);
        dtq_redis_url_where(&copy, where, sizeof(where));
        dtq_handshake_plan(&h, &copy, &o);
        dtq_redis_url_deinit(&copy);
        dtq_redis_url_deinit(&u);
    }
    if (dtq_split_hostport(s, &host, &port) == 0) {
        if (port < 1 || port > 65535) abort();
        free(host);
    }
    free(s);
    return 0;
}
