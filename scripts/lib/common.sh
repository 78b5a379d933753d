# Shared by scripts/test and scripts/demo: install what is missing, build.
# shellcheck shell=bash

# What building and running need; scripts/test adds its tools (valgrind, clang-format).
DTQ_PACKAGES="build-essential cmake pkg-config libhiredis-dev libevent-dev libcjson-dev uuid-dev
libinih-dev libssl-dev openssl check redis-server redis-tools redis-sentinel"

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

ensure_deps() {
    local missing=()
    for p in $DTQ_PACKAGES "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Installing the packages starts a system redis-server, redis-sentinel and prometheus;
    # the scripts use private ones (and promtool alone), so stop those we caused (never one
    # that was there before).
    case " ${missing[*]} " in
        *" redis-server "*) systemctl disable --now redis-server >/dev/null 2>&1 || true;;
    esac
    case " ${missing[*]} " in
        *" prometheus "*) systemctl disable --now prometheus >/dev/null 2>&1 || true;;
    esac
    case " ${missing[*]} " in
        *" redis-sentinel "*)
            { systemctl disable --now redis-sentinel || service redis-sentinel stop; } \
                >/dev/null 2>&1 || true;;
    esac
}

# build DIR [cmake args...]
build() {
    local dir=$1
    shift
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    if ! cmake --build "$dir" -j"$(nproc)" >"$dir/build.log" 2>&1; then
        cat "$dir/build.log" >&2
        echo "build failed in $dir (log: $dir/build.log)" >&2
        exit 1
    fi
}
