/* reply_class.c: the error reply's text to a class (reply_class.h). The only file of src/
 * that compares a reply's text (tests/scripts/reply_text.sh holds the rest to that). */
#include <string.h>

#include "reply_class.h"

/* By first word, matched whole: "NOT_FOUNDX" is no NOT_FOUND. The two ERR-led entries are
 * whole prefixes: Redis says them after "ERR", which alone means nothing. */
static const struct {
    const char *word;
    dtq_reply_class cls;
} words[] = {
    {"OTHER", DTQ_REPLY_OTHER}, /* the name only: never matched (see dtq_reply_class_of) */
    {"INVALID_ARGUMENT", DTQ_REPLY_INVALID_ARGUMENT},
    {"NOT_FOUND", DTQ_REPLY_NOT_FOUND},
    {"WRONG_STATE", DTQ_REPLY_WRONG_STATE},
    {"PAYLOAD_TOO_LARGE", DTQ_REPLY_PAYLOAD_TOO_LARGE},
    {"QUEUE_FULL", DTQ_REPLY_QUEUE_FULL},
    {"IDEMPOTENCY_IN_PROGRESS", DTQ_REPLY_IDEMPOTENCY_IN_PROGRESS},
    {"ID_EXISTS", DTQ_REPLY_ID_EXISTS},
    {"NOT_EMPTY", DTQ_REPLY_NOT_EMPTY},
    {"WRONG_LAYOUT", DTQ_REPLY_WRONG_LAYOUT},
    {"TRYAGAIN", DTQ_REPLY_TRYAGAIN},
    {"ERR Function not found", DTQ_REPLY_NO_FUNCTION},
    {"NOSCRIPT", DTQ_REPLY_NOSCRIPT},
    {"NOPERM", DTQ_REPLY_NOPERM},
    {"ERR The user executing the script can't", DTQ_REPLY_NOPERM_IN_SCRIPT},
    {"NOAUTH", DTQ_REPLY_NOAUTH},
    {"WRONGPASS", DTQ_REPLY_WRONGPASS},
    {"BUSYGROUP", DTQ_REPLY_BUSYGROUP},
    {"READONLY", DTQ_REPLY_READONLY},
    {"LOADING", DTQ_REPLY_LOADING},
    {"MASTERDOWN", DTQ_REPLY_MASTERDOWN},
    {"MOVED", DTQ_REPLY_MOVED},
    {"ASK", DTQ_REPLY_ASK},
    {"CLUSTERDOWN", DTQ_REPLY_CLUSTERDOWN},
};
#define NWORDS (sizeof(words) / sizeof(words[0]))

dtq_reply_class dtq_reply_class_of(const char *err) {
    if (!err) return DTQ_REPLY_OTHER;
    for (size_t i = 1; i < NWORDS; i++) {
        size_t n = strlen(words[i].word);
        if (!strncmp(err, words[i].word, n) && (err[n] == ' ' || err[n] == '\0'))
            return words[i].cls;
    }
    return DTQ_REPLY_OTHER;
}

const char *dtq_reply_detail(const char *err) {
    const char *sp;
    if (!err) return "";
    sp = strchr(err, ' ');
    return sp ? sp + 1 : "";
}

int dtq_reply_class_unavailable(dtq_reply_class c) {
    return c == DTQ_REPLY_READONLY || c == DTQ_REPLY_LOADING || c == DTQ_REPLY_MASTERDOWN;
}

const char *dtq_reply_class_name(dtq_reply_class c) {
    for (size_t i = 0; i < NWORDS; i++)
        if (words[i].cls == c) return words[i].word;
    return "OTHER";
}
