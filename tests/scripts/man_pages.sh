#!/usr/bin/env bash
# The man pages are kept in step with --help: every option in each program's --help
# output, and every verb (and sub-verb) in dtqctl's, is in the page's Markdown source
# (docs/man/*.md), and dtqctl's page documents no verb that --help does not list. With
# the built pages (a build that found go-md2man), each renders without a groff warning.
# Usage: tests/scripts/man_pages.sh SOURCE_DIR DTQ_WORKER DTQCTL DTQ_WEB [BUILT_MAN_DIR]
set -euo pipefail
src=$1
declare -A bin=([dtq-worker]=$2 [dtqctl]=$3 [dtq-web]=$4)
declare -A page=([dtq-worker]=dtq-worker.8 [dtqctl]=dtqctl.1 [dtq-web]=dtq-web.8)
built=${5:-}
# shellcheck source-path=SCRIPTDIR source=cli_help.sh
. "$src/tests/scripts/cli_help.sh"
fails=0 checks=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

for prog in dtq-worker dtqctl dtq-web; do
    md=$src/docs/man/${page[$prog]}.md
    [ -f "$md" ] || { fail "$prog: no $md"; continue; }
    help=$("${bin[$prog]}" --help)
    # the source as a reader sees it: no emphasis marks, no escapes
    text=$(tr -d '*\134' <"$md")
    opts=$(help_options "$help")
    [ -n "$opts" ] || fail "$prog: no option found in --help"
    for o in $opts; do
        checks=$((checks + 1))
        grep -qE -- "(^|[^A-Za-z0-9_-])$o(\$|[^A-Za-z0-9-])" <<<"$text" ||
            fail "$prog: --help lists $o, ${page[$prog]}.md does not"
    done
done

help=$("${bin[dtqctl]}" --help)
mapfile -t rows < <(help_rows "$help")
[ "${#rows[@]}" -ge 10 ] || fail "dtqctl: only ${#rows[@]} verbs found in --help"
text=$(tr -d '*\134' <"$src/docs/man/dtqctl.1.md")
for row in "${rows[@]}"; do
    checks=$((checks + 1))
    grep -qE "^$row( |\$)" <<<"$text" ||
        fail "dtqctl: --help lists the verb '$row', dtqctl.1.md has no entry for it"
done
# the other way: each entry of COMMANDS is a verb of --help
declare -A known=()
for row in "${rows[@]}"; do known[$row]=1; done
while read -r w1 w2 _; do
    checks=$((checks + 1))
    [ -n "${known[$w1 $w2]:-}" ] || [ -n "${known[$w1]:-}" ] ||
        fail "dtqctl.1.md documents '$w1 $w2', which dtqctl --help does not list"
done < <(awk '/^# /{ on = ($0 == "# COMMANDS") } on && /^\*\*/' "$src/docs/man/dtqctl.1.md" |
    tr -d '*\134')

if [ -n "$built" ]; then
    for prog in dtq-worker dtqctl dtq-web; do
        f=$built/${page[$prog]}.gz
        checks=$((checks + 1))
        if [ ! -s "$f" ]; then
            fail "no built page $f"
            continue
        fi
        out=$(MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -l "$f" 2>&1 >/dev/null) ||
            fail "$f: man failed"
        [ -z "$out" ] || fail "$f: groff warnings: $out"
        zcat "$f" | grep -q "^\.TH $prog ${page[$prog]##*.} " || fail "$f: no .TH $prog line"
    done
fi

if [ "$fails" -gt 0 ]; then
    echo "man pages: $fails of $checks checks failed" >&2
    exit 1
fi
echo "man pages: $checks checks passed"
