/* web_auth.c: token files and the constant-time bearer check. */
#include "web_auth.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "util.h"

#define DIGEST_LEN 32
#define TOKEN_FILE_MAX (64 * 1024)

typedef struct web_token {
    unsigned char digest[DIGEST_LEN]; /* SHA-256 of the token; the token itself is not kept */
    char *actor;                      /* "dtq-web" or "dtq-web:<name>" */
} web_token;

struct dtq_web_tokens {
    web_token v[DTQ_WEB_TOKENS_MAX];
    int n;
};

static void sha256(const char *s, size_t len, unsigned char out[DIGEST_LEN]) {
    unsigned int outlen = 0;
    if (EVP_Digest(s, len, out, &outlen, EVP_sha256(), NULL) != 1 || outlen != DIGEST_LEN) abort();
}

/* A token is printable ASCII without blanks (what `openssl rand -hex 32` or -base64 make). */
static int valid_token(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (s[i] <= ' ' || s[i] > '~') return 0;
    return 1;
}

dtq_web_tokens *dtq_web_tokens_parse(const char *text, char *err, size_t errlen) {
    dtq_web_tokens *t = dtq_xcalloc(1, sizeof(*t));
    const char *line = text;
    int lineno = 0;
    while (*line) {
        const char *end = strchr(line, '\n'), *next;
        char *copy, *save = NULL, *w1, *w2, *w3;
        size_t clen;
        if (!end) end = line + strlen(line);
        next = *end ? end + 1 : end;
        lineno++;
        clen = (size_t)(end - line);
        copy = dtq_xstrndup(line, clen);
        line = next;
        w1 = strtok_r(copy, " \t\r", &save);
        if (!w1 || *w1 == '#') {
            OPENSSL_cleanse(copy, clen);
            free(copy);
            continue;
        }
        w2 = strtok_r(NULL, " \t\r", &save);
        w3 = w2 ? strtok_r(NULL, " \t\r", &save) : NULL;
        if (w3) {
            snprintf(err, errlen, "line %d: expected '<token>' or '<name> <token>'", lineno);
            goto fail;
        }
        if (w2 && !dtq_valid_name(w1, strlen(w1), 64)) {
            snprintf(err, errlen, "line %d: the name must match [A-Za-z0-9._:-]{1,64}", lineno);
            goto fail;
        }
        {
            const char *tok = w2 ? w2 : w1;
            size_t len = strlen(tok);
            web_token *wt;
            if (len < DTQ_WEB_TOKEN_MIN || !valid_token(tok, len)) {
                snprintf(err, errlen,
                         "line %d: a token must be at least %d printable characters without "
                         "blanks (e.g. openssl rand -hex 32)",
                         lineno, DTQ_WEB_TOKEN_MIN);
                goto fail;
            }
            if (t->n == DTQ_WEB_TOKENS_MAX) {
                snprintf(err, errlen, "line %d: more than %d tokens", lineno, DTQ_WEB_TOKENS_MAX);
                goto fail;
            }
            wt = &t->v[t->n++];
            sha256(tok, len, wt->digest);
            wt->actor = w2 ? dtq_xasprintf("dtq-web:%s", w1) : dtq_xstrdup("dtq-web");
        }
        OPENSSL_cleanse(copy, clen);
        free(copy);
        continue;
    fail:
        OPENSSL_cleanse(copy, clen);
        free(copy);
        dtq_web_tokens_free(t);
        return NULL;
    }
    if (t->n == 0) {
        snprintf(err, errlen, "no token in the file");
        dtq_web_tokens_free(t);
        return NULL;
    }
    return t;
}

dtq_web_tokens *dtq_web_tokens_load(const char *path, char *err, size_t errlen) {
    struct stat sb;
    FILE *f;
    char *buf, perr[256];
    size_t n;
    dtq_web_tokens *t;
    if (stat(path, &sb) != 0 || !(f = fopen(path, "r"))) {
        snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > TOKEN_FILE_MAX) {
        snprintf(err, errlen, "'%s' is not a regular file of at most %d bytes", path,
                 TOKEN_FILE_MAX);
        fclose(f);
        return NULL;
    }
    buf = dtq_xcalloc(1, TOKEN_FILE_MAX + 1);
    n = fread(buf, 1, TOKEN_FILE_MAX, f);
    fclose(f);
    if (memchr(buf, '\0', n)) {
        snprintf(err, errlen, "'%s' holds a NUL byte", path);
        free(buf);
        return NULL;
    }
    t = dtq_web_tokens_parse(buf, perr, sizeof(perr));
    OPENSSL_cleanse(buf, n);
    free(buf);
    if (!t) snprintf(err, errlen, "%s: %s", path, perr);
    return t;
}

void dtq_web_tokens_free(dtq_web_tokens *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->v[i].actor);
    OPENSSL_cleanse(t, sizeof(*t));
    free(t);
}

int dtq_web_tokens_count(const dtq_web_tokens *t) {
    return t ? t->n : 0;
}

const char *dtq_web_tokens_check(const dtq_web_tokens *t, const char *authorization) {
    unsigned char digest[DIGEST_LEN];
    const char *p, *end, *actor = NULL;
    if (!t || !authorization) return NULL;
    p = authorization;
    while (*p == ' ' || *p == '\t') p++;
    if (strncasecmp(p, "Bearer", 6) || (p[6] != ' ' && p[6] != '\t')) return NULL;
    p += 6;
    while (*p == ' ' || *p == '\t') p++;
    end = p + strlen(p);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
    if (end == p) return NULL;
    /* Digests are compared, not tokens: equal lengths, and no early exit over the list. */
    sha256(p, (size_t)(end - p), digest);
    for (int i = 0; i < t->n; i++)
        if (CRYPTO_memcmp(digest, t->v[i].digest, DIGEST_LEN) == 0 && !actor) actor = t->v[i].actor;
    return actor;
}
