#!/usr/bin/env bash
# The install layout under the default prefix and under /usr: every path the units name
# (Documentation=, the configuration directory, the binaries) is where the install puts
# things, the example and the ready configuration land in /etc/dtq as the README says (a
# second install keeps an edited worker.ini), dtqctl's completion is installed, and the
# SDKs land where python3 and node look (issue 28).
# Usage: tests/scripts/install_layout.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d /tmp/dtq-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
checks=0

for prefix in default /usr; do
    b=$tmp/build-${prefix//\//_}
    d=$tmp/root-${prefix//\//_}
    args=(-DDTQ_BUILD_TESTS=OFF)
    [ "$prefix" = default ] || args+=(-DCMAKE_INSTALL_PREFIX="$prefix")
    cmake -S "$src" -B "$b" "${args[@]}" >/dev/null
    DESTDIR=$d cmake --install "$b" --component data >/dev/null
    bindir=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$b/CMakeCache.txt")/bin
    [ -f "$d/etc/dtq/config.example.ini" ] || fail "$prefix: no /etc/dtq/config.example.ini"
    [ -f "$d/etc/dtq/worker.ini" ] || fail "$prefix: no /etc/dtq/worker.ini"
    # a second install keeps the operator's worker.ini
    echo "; edited" >>"$d/etc/dtq/worker.ini"
    DESTDIR=$d cmake --install "$b" --component data >/dev/null
    [ "$(tail -n 1 "$d/etc/dtq/worker.ini")" = "; edited" ] ||
        fail "$prefix: a second install replaced /etc/dtq/worker.ini"
    [ -f "$d${bindir%/bin}/share/bash-completion/completions/dtqctl" ] ||
        fail "$prefix: no bash completion in ${bindir%/bin}/share/bash-completion/completions"
    # the alert rules, as an example of the docs (Debian Policy 12.6)
    [ -f "$d${bindir%/bin}/share/doc/dtq/examples/dtq-alerts.yml" ] ||
        fail "$prefix: no alert rules in ${bindir%/bin}/share/doc/dtq/examples"
    checks=$((checks + 5))
    # the Python SDK in a directory python3 searches with no PYTHONPATH, and nothing else of sdk/
    p=${bindir%/bin}
    inits=$(cd "$d" && find ".$p/lib" -path '*/dtq/__init__.py' | sed 's|^\.||')
    if [ -z "$inits" ] || [ "$(wc -l <<<"$inits")" -ne 1 ]; then fail "$prefix: Python SDK installed as: '$inits'"; fi
    /usr/bin/python3 -c 'import site, sys; sys.exit(sys.argv[1] not in site.getsitepackages())' "$(dirname "$(dirname "$inits")")" ||
        fail "$prefix: $inits is not in a directory python3 searches"
    got=$(cd / && PYTHONPATH=$d$(dirname "$(dirname "$inits")") /usr/bin/python3 -c 'import dtq; print(dtq.PROTOCOL)')
    [ "$got" = 1 ] || fail "$prefix: the installed Python SDK answers protocol '$got'"
    [ -z "$(find "$d" -path '*/dtq/*' \( -name '__pycache__' -o -name 'test*' \))" ] ||
        fail "$prefix: byte code or tests of the SDK installed"
    # the Node SDK in share/nodejs (Debian's node) and lib/node (upstream's), one copy
    [ -f "$d$p/share/nodejs/dtq/index.js" ] || fail "$prefix: no $p/share/nodejs/dtq/index.js"
    [ "$(readlink -f "$d$p/lib/node/dtq")" = "$d$p/share/nodejs/dtq" ] ||
        fail "$prefix: $p/lib/node/dtq does not lead to $p/share/nodejs/dtq"
    for root in share/nodejs lib/node; do
        got=$(cd / && NODE_PATH=$d$p/$root /usr/bin/node -e 'process.stdout.write(String(require("dtq").PROTOCOL))')
        [ "$got" = 1 ] || fail "$prefix: node with NODE_PATH=$p/$root requires protocol '$got'"
    done
    [ -f "$d$p/share/doc/dtq/sdk/PROTOCOL.md" ] || fail "$prefix: no $p/share/doc/dtq/sdk/PROTOCOL.md"
    checks=$((checks + 8))
    units=$(find "$d" -path '*/lib/systemd/system/*.service' | sort)
    [ "$(echo "$units" | wc -l)" -eq 3 ] || fail "$prefix: expected 3 units, got: $units"
    # one user per instance: an instance's handlers cannot reach another instance's daemon
    grep -qx 'User=dtq-%i' "$(grep 'dtq-worker@' <<<"$units")" ||
        fail "$prefix: dtq-worker@.service does not run each instance as its own user"
    checks=$((checks + 1))
    for u in $units; do
        doc=$(sed -n 's|^Documentation=file://||p' "$u")
        if [ -z "$doc" ] || [ ! -f "$d$doc" ]; then
            fail "$prefix: $(basename "$u") documents '$doc', not installed"
        fi
        while read -r exe; do
            [ "$(dirname "$exe")" = "$bindir" ] || fail "$prefix: $(basename "$u") runs $exe, binaries go to $bindir"
        done < <(grep -o '^Exec[A-Za-z]*=[^ ]*dtq-[a-z]*' "$u" | cut -d= -f2)
        grep -q -- "-c /etc/dtq/" "$u" || fail "$prefix: $(basename "$u") reads no config from /etc/dtq"
        # handlers must not see other users' processes (issue 27.2)
        for directive in ProtectProc=invisible PrivateMounts=yes NoNewPrivileges=yes DynamicUser=yes; do
            grep -qx "$directive" "$u" || fail "$prefix: $(basename "$u") lacks $directive"
        done
        checks=$((checks + 7))
    done
done
echo "install layout: $checks checks passed"
