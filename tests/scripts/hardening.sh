#!/usr/bin/env bash
# The installed programs carry the release hardening of CMakeLists.txt (DTQ_HARDEN): a
# position-independent executable (ELF type DYN, FLAGS_1 PIE), full RELRO (a GNU_RELRO
# segment and BIND_NOW), the stack protector (__stack_chk_fail imported) and
# _FORTIFY_SOURCE (at least one __*_chk function imported). readelf only (binutils).
# Usage: tests/scripts/hardening.sh BINARY...
set -euo pipefail
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}
for bin in "$@"; do
    name=$(basename "$bin")
    before=$fails
    header=$(readelf -h "$bin")
    dynamic=$(readelf -d "$bin")
    segments=$(readelf -lW "$bin")
    symbols=$(readelf -sW --dyn-syms "$bin")
    grep -Eq 'Type:[[:space:]]+DYN' <<<"$header" || fail "$name: not position-independent (ELF type is not DYN)"
    grep -Eq '\(FLAGS_1\).*PIE' <<<"$dynamic" || fail "$name: no PIE in FLAGS_1 (not linked with -pie)"
    grep -q 'GNU_RELRO' <<<"$segments" || fail "$name: no GNU_RELRO segment (-z relro)"
    grep -Eq '\(BIND_NOW\)|\(FLAGS\).*BIND_NOW|\(FLAGS_1\).*NOW' <<<"$dynamic" ||
        fail "$name: no BIND_NOW (-z now): RELRO is partial"
    grep -q '__stack_chk_fail' <<<"$symbols" || fail "$name: no __stack_chk_fail (no stack protector)"
    grep -Eq '__[a-z0-9_]+_chk(@|[[:space:]]|$)' <<<"$symbols" ||
        fail "$name: no __*_chk function (not built with _FORTIFY_SOURCE)"
    if [ "$fails" -eq "$before" ]; then
        echo "ok: $name: PIE, full RELRO, stack protector, fortify"
    fi
done
if [ "$fails" -ne 0 ]; then
    echo "$fails hardening check(s) failed" >&2
    exit 1
fi
