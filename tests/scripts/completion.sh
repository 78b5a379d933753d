#!/usr/bin/env bash
# The bash completion of dtqctl offers exactly what `dtqctl --help` lists: the verbs, the
# sub-verbs of each verb, the global options, each verb's options, the roles of acl.
# Usage: tests/scripts/completion.sh SOURCE_DIR DTQCTL
set -euo pipefail
src=$1
ctl=$2
# shellcheck source-path=SCRIPTDIR source=cli_help.sh
. "$src/tests/scripts/cli_help.sh"
# shellcheck source=/dev/null
. "$src/packaging/dtqctl.bash-completion"
fails=0 checks=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# complete WORD... : what TAB offers for the last word, sorted, one per line
complete_words() {
    COMP_WORDS=("$ctl" "$@")
    COMP_CWORD=$#
    COMPREPLY=()
    _dtqctl
    [ ${#COMPREPLY[@]} -eq 0 ] || printf '%s\n' "${COMPREPLY[@]}" | sort
}
# expect WHAT GOT WANT
expect() {
    checks=$((checks + 1))
    [ "$2" = "$3" ] || fail "$1: offered [${2//$'\n'/ }], --help lists [${3//$'\n'/ }]"
}

help=$("$ctl" --help)
mapfile -t rows < <(help_rows "$help")
[ "${#rows[@]}" -ge 10 ] || fail "only ${#rows[@]} verbs found in --help"
verbs=$(printf '%s\n' "${rows[@]%% *}" | sort -u)

expect "verbs" "$(complete_words '')" "$verbs"
expect "global options" "$(complete_words -)" "$( (echo --help; help_global_options "$help") | sort)"
expect "verbs after -c FILE --json" "$(complete_words -c /dev/null --json '')" "$verbs"
for v in $verbs; do
    subs=$(printf '%s\n' "${rows[@]}" | sed -n "s/^$v //p" | sort)
    [ -n "$subs" ] || continue
    expect "sub-verbs of $v" "$(complete_words "$v" '')" "$subs"
done
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086 # the row is one or two words
    expect "options of '$row'" "$(complete_words $row ARG -)" "$(help_row_options "$help" "$row")"
done
roles=$(complete_words acl '')
expect "acl roles" "$(grep -c . <<<"$roles")" 5
grep -qx worker <<<"$roles" || fail "acl: no role 'worker' offered: $roles"
checks=$((checks + 1))

if [ "$fails" -gt 0 ]; then
    echo "completion: $fails of $checks checks failed" >&2
    exit 1
fi
echo "completion: $checks checks passed"
