/* cron_oracle.c: a test-only filter over src/cron.c for tests/unit/cron_oracle.py. Reads lines
 * `spec<TAB>tz<TAB>after_ms` on stdin and prints one line each: the next fire time in epoch
 * ms, `none` when the spec never fires within the horizon (or the zone is not valid), or
 * `error <message>` when the spec does not parse. @every specs use anchor 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron.h"

int main(void) {
    char line[1024];
    while (fgets(line, sizeof(line), stdin)) {
        char *tab1, *tab2, err[256];
        dtq_cron c;
        int64_t next;
        line[strcspn(line, "\n")] = '\0';
        tab1 = strchr(line, '\t');
        tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        if (!tab2) {
            printf("error bad input line\n");
            continue;
        }
        *tab1 = *tab2 = '\0';
        if (dtq_cron_parse(line, &c, err, sizeof(err)) < 0)
            printf("error %s\n", err);
        else if (dtq_cron_next(&c, tab1 + 1, 0, strtoll(tab2 + 1, NULL, 10), &next) < 0)
            printf("none\n");
        else
            printf("%lld\n", (long long)next);
        fflush(stdout);
    }
    return 0;
}
