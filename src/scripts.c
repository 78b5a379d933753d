/* scripts.c: the embedded library as loaded. The assembled text (lua/dtq.lua, its head,
 * then the modules: cmake/lua_library.cmake) has exactly one shebang line, one
 * `local NS, PREFIX = ...` line, after it one `local VERSION = ...` line and after that
 * one `local CONST = <global>` line, the placeholder of the constants whose owner is on
 * the C side (written here from keys.h, streams.h, config.c, task.c and util.h, so the
 * source text alone refuses to load); all four are rewritten here. */
#include "scripts.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "keys.h"
#include "streams.h"
#include "task.h"
#include "util.h"

extern const unsigned char dtq_lua_library[];
extern const size_t dtq_lua_library_len;

#define NS_LINE "local NS, PREFIX = 'dtq', 'dtq'"
#define VERSION_LINE "local VERSION = 'unversioned'"
#define CONSTANTS_LINE "local CONST = "

/* The markers, checked once per use: a build that embedded a file without them, or not in
 * this order, is broken. */
typedef struct layout {
    const char *src, *end;
    const char *first_nl, *ns_line, *version_line;
    const char *constants_line, *constants_end; /* the placeholder, to its newline */
} layout;

static void find_layout(layout *l) {
    l->src = (const char *)dtq_lua_library;
    l->end = l->src + dtq_lua_library_len;
    l->first_nl = strchr(l->src, '\n');
    l->ns_line = strstr(l->src, NS_LINE);
    l->version_line = strstr(l->src, VERSION_LINE);
    l->constants_line = strstr(l->src, CONSTANTS_LINE);
    l->constants_end = l->constants_line ? strchr(l->constants_line, '\n') : NULL;
    if (!l->first_nl || !l->ns_line || !l->version_line || !l->constants_end ||
        l->version_line < l->ns_line || l->constants_line < l->version_line)
        abort();
}

/* A table being written: items are separated as they come. */
typedef struct table {
    FILE *f;
    int n;
} table;

static void item(table *t) {
    if (t->n++) fputs(", ", t->f);
}

/* A Lua string literal of a name or word: the C tables hold nothing that needs escaping. */
static void lua_word(FILE *f, const char *s) {
    if (strpbrk(s, "'\\\n")) abort();
    fprintf(f, "'%s'", s);
}

static void defaults_item(const dtq_config_field *c, void *arg) {
    table *t = arg;
    if (!(c->flags & DTQ_FIELD_DEFAULT)) return;
    item(t);
    fprintf(t->f, "%s = ", c->name);
    if (c->word)
        lua_word(t->f, c->def);
    else
        fputs(c->def, t->f);
}

static void bounds_item(const dtq_config_field *c, void *arg) {
    table *t = arg;
    if (!(c->flags & DTQ_FIELD_READ) || c->word) return;
    item(t);
    fprintf(t->f, "%s = {%.0f, %.0f}", c->name, c->min, c->max);
}

static void names_item(const dtq_config_field *c, void *arg) {
    table *t = arg;
    if (!(c->flags & DTQ_FIELD_READ)) return;
    item(t);
    lua_word(t->f, c->name);
}

/* The line that replaces the placeholder: the table CONST of the constants whose owner is
 * on the C side. One line, so that a line number in a Function's error is the assembled
 * text's (scripts/lua-where maps it back to its module). */
static char *constants_block(size_t *len) {
    char *out = NULL;
    FILE *f = open_memstream(&out, len);
    table t;
    if (!f) abort();
    fputs("local CONST = {GROUP = ", f);
    lua_word(f, DTQ_GROUP);
    fprintf(f, ", BANDS = %d, BAND_NAMES = {", DTQ_BANDS);
    for (int b = 0; b < DTQ_BANDS; b++) fprintf(f, b ? ", 'p%d'" : "[0] = 'p%d'", b);
    fprintf(
        f,
        "}, MAX_ATTEMPTS = %d, NAME_MAX = %d, ID_MAX = %d, GROUP_MAX = %d, BATCH_LIST_MAX = %d, "
        "TERMINAL = {",
        DTQ_MAX_ATTEMPTS, DTQ_NAME_MAX, DTQ_ID_MAX, DTQ_GROUP_MAX, DTQ_BATCH_LIST_MAX);
    t = (table){f, 0};
    for (const char *const *s = dtq_task_terminal_statuses; *s; s++) {
        item(&t);
        fprintf(f, "%s = true", *s);
    }
    fputs("}, DEFAULTS = {", f);
    t = (table){f, 0};
    dtq_config_each_field(defaults_item, &t);
    fputs("}, CONFIG_BOUNDS = {", f);
    t = (table){f, 0};
    dtq_config_each_field(bounds_item, &t);
    fputs("}, CONFIG_NAMES = {", f);
    t = (table){f, 0};
    dtq_config_each_field(names_item, &t);
    fputs("}} -- generated at load time by src/scripts.c (keys.h, streams.h, config.c, task.c, "
          "util.h)\n",
          f);
    if (fclose(f) != 0) abort();
    return out;
}

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

const char *dtq_scripts_version(void) {
    static char version[64];
    if (!version[0]) {
        /* FNV-1a (64 bit) of the library text with its generated block, as loaded before the
         * namespace and version are written in: a marker, not a signature */
        layout l;
        size_t blen;
        char *block = constants_block(&blen);
        uint64_t h = 14695981039346656037ULL;
        find_layout(&l);
        h = fnv1a(h, l.src, (size_t)(l.constants_line - l.src));
        h = fnv1a(h, block, blen);
        h = fnv1a(h, l.constants_end + 1, (size_t)(l.end - l.constants_end - 1));
        free(block);
        snprintf(version, sizeof(version), "%s-%016llx", DTQ_VERSION, (unsigned long long)h);
    }
    return version;
}

char *dtq_scripts_library(const char *ns, const char *prefix, size_t *len) {
    layout l;
    size_t blen;
    char *block = constants_block(&blen), *out;
    find_layout(&l);
    out = dtq_xasprintf("#!lua name=%s\n%.*slocal NS, PREFIX = '%s', '%s'%.*slocal VERSION = "
                        "'%s'%.*s%s%s",
                        ns, (int)(l.ns_line - l.first_nl - 1), l.first_nl + 1, ns, prefix,
                        (int)(l.version_line - l.ns_line - strlen(NS_LINE)),
                        l.ns_line + strlen(NS_LINE), dtq_scripts_version(),
                        (int)(l.constants_line - l.version_line - strlen(VERSION_LINE)),
                        l.version_line + strlen(VERSION_LINE), block, l.constants_end + 1);
    free(block);
    *len = strlen(out);
    return out;
}
