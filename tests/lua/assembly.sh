#!/usr/bin/env bash
# The assembled Functions library: within its limits (scripts/lua-limits, which must also
# refuse a chunk past them), and every module's lines mapped back from the assembled text
# (scripts/lua-where): for each module, each `local function` line of the module is found
# at the line lua-where names.
# usage: lua_library.sh SOURCE_DIR ASSEMBLED_LIBRARY
set -euo pipefail
src=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$src/scripts/lua-limits" "$lib"

# a main chunk of 151 locals, and a function of 41 upvalues, are refused
{ for i in $(seq 1 151); do echo "local a$i = $i"; done; } >"$tmp/locals.lua"
if "$src/scripts/lua-limits" "$tmp/locals.lua" >/dev/null 2>&1; then
    echo "lua-limits passed a main chunk of 151 locals" >&2
    exit 1
fi
{
    for i in $(seq 1 41); do echo "local u$i = $i"; done
    printf 'local function f() return u1'
    for i in $(seq 2 41); do printf ' + u%d' "$i"; done
    printf ' end\n'
} >"$tmp/upvalues.lua"
if "$src/scripts/lua-limits" "$tmp/upvalues.lua" >/dev/null 2>&1; then
    echo "lua-limits passed a function of 41 upvalues" >&2
    exit 1
fi

# every `local function` line, mapped in one run
mapfile -t lines < <(grep -n '^local function ' "$lib" | cut -d: -f1)
mapfile -t places < <("$src/scripts/lua-where" --lib "$lib" "${lines[@]}")
[ "${#places[@]}" -eq "${#lines[@]}" ] || { echo "lua-where mapped ${#places[@]} of ${#lines[@]}" >&2; exit 1; }
checked=0
for i in "${!lines[@]}"; do
    n=${lines[$i]} where=${places[$i]}
    case $where in *"(generated)") continue ;; esac
    file=${where%%:*} line=${where##*:}
    want=$(sed -n "${n}p" "$lib")
    got=$(sed -n "${line}p" "$src/$file")
    if [ "$want" != "$got" ]; then
        echo "line $n of $lib maps to $where, which reads: $got" >&2
        exit 1
    fi
    checked=$((checked + 1))
done
modules=$(grep -c -- '-- @module lua/' "$lib")
[ "$modules" -ge 20 ] || { echo "only $modules modules in $lib" >&2; exit 1; }
echo "lua-where: $checked function lines of $modules modules map back"
