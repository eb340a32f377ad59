#!/bin/sh
# Checks the unit files with `systemd-analyze verify`: evstored.service,
# evstored.socket, evstore-metrics.service, evstore-metrics.timer and evstore-nats.service.
# Usage: systemd/verify.sh [EVSTORED [EVCTL [EVSTORE_NATS]]]
# EVSTORED and EVCTL are the binaries the ExecStart lines are pointed at for the check
# (the units name /usr/bin/evstored and /usr/bin/evctl, which may not be installed
# here). Default for EVSTORED: the first that exists of /usr/bin/evstored,
# .build/release/evstored (in the repository), /bin/true. Default for EVCTL: evctl
# beside EVSTORED when EVSTORED is given, else the first that exists of /usr/bin/evctl,
# .build/release/evctl, /bin/true. EVSTORE_NATS likewise.
# Works offline: no running systemd is needed. Exits non-zero on any warning or error.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd units: systemd-analyze not found (install the systemd package)" >&2
    exit 2
fi

# The first of the arguments that is an executable file, else /bin/true.
first_executable() {
    for candidate in "$@"; do
        if [ -x "$candidate" ] && [ ! -d "$candidate" ]; then
            echo "$candidate"
            return
        fi
    done
    echo /bin/true
}

# An absolute path for $1, which must be an executable file.
checked_binary() {
    case $1 in
        /*) path=$1 ;;
        *) path=$(pwd)/$1 ;;
    esac
    if [ ! -x "$path" ] || [ -d "$path" ]; then
        echo "systemd units: $path is not an executable file" >&2
        exit 64
    fi
    echo "$path"
}

if [ $# -gt 3 ]; then
    echo "usage: $0 [EVSTORED [EVCTL [EVSTORE_NATS]]]" >&2
    exit 64
fi
if [ $# -ge 1 ]; then
    binary=$(checked_binary "$1")
else
    binary=$(first_executable /usr/bin/evstored "$root/.build/release/evstored")
fi
if [ $# -ge 2 ]; then
    evctl=$(checked_binary "$2")
elif [ $# -eq 1 ]; then
    evctl=$(first_executable "$(dirname "$binary")/evctl" /usr/bin/evctl "$root/.build/release/evctl")
else
    evctl=$(first_executable /usr/bin/evctl "$root/.build/release/evctl")
fi
if [ $# -eq 3 ]; then
    bridge=$(checked_binary "$3")
elif [ $# -ge 1 ]; then
    bridge=$(first_executable "$(dirname "$binary")/evstore-nats" /usr/bin/evstore-nats \
        "$root/.build/release/evstore-nats")
else
    bridge=$(first_executable /usr/bin/evstore-nats "$root/.build/release/evstore-nats")
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# ExecStart names a link in the temp dir, so any path works without quoting.
ln -s "$binary" "$work/evstored"
sed "s|^ExecStart=/usr/bin/evstored\$|ExecStart=$work/evstored|" \
    "$here/evstored.service" >"$work/evstored.service"
if ! grep -q "^ExecStart=$work/evstored\$" "$work/evstored.service"; then
    echo "systemd units: evstored.service has no line ExecStart=/usr/bin/evstored" >&2
    exit 1
fi
cp "$here/evstored.socket" "$work/evstored.socket"

ln -s "$evctl" "$work/evctl"
sed "s|^ExecStart=/usr/bin/evctl |ExecStart=$work/evctl |" \
    "$here/evstore-metrics.service" >"$work/evstore-metrics.service"
if ! grep -q "^ExecStart=$work/evctl metrics " "$work/evstore-metrics.service"; then
    echo "systemd units: evstore-metrics.service has no line ExecStart=/usr/bin/evctl metrics ..." >&2
    exit 1
fi
cp "$here/evstore-metrics.timer" "$work/evstore-metrics.timer"

ln -s "$bridge" "$work/evstore-nats"
sed "s|^ExecStart=/usr/bin/evstore-nats |ExecStart=$work/evstore-nats |" \
    "$here/evstore-nats.service" >"$work/evstore-nats.service"
if ! grep -q "^ExecStart=$work/evstore-nats --config " "$work/evstore-nats.service"; then
    echo "systemd units: evstore-nats.service has no line ExecStart=/usr/bin/evstore-nats --config ..." >&2
    exit 1
fi

# Documentation=man:... is checked with `man`: the pages are rendered from man/*.scd when
# they are not installed (scdoc); without scdoc, those lines are left out of the check.
mkdir -p "$work/man/man1" "$work/man/man8"
if command -v scdoc >/dev/null 2>&1 && command -v man >/dev/null 2>&1; then
    scdoc <"$root/man/evctl.1.scd" >"$work/man/man1/evctl.1"
    scdoc <"$root/man/evstored.8.scd" >"$work/man/man8/evstored.8"
    scdoc <"$root/man/evstore-nats.8.scd" >"$work/man/man8/evstore-nats.8"
    export MANPATH="$work/man:"
else
    echo "systemd units: scdoc or man not found; Documentation= is not checked" >&2
    for unit in "$work"/*.service "$work"/*.socket "$work"/*.timer; do
        sed -i '/^Documentation=man:/d' "$unit"
    done
fi

status=0
output=$(systemd-analyze verify "$work/evstored.service" "$work/evstored.socket" \
    "$work/evstore-metrics.service" "$work/evstore-metrics.timer" "$work/evstore-nats.service" 2>&1) || status=$?

if [ "$status" -ne 0 ] || [ -n "$output" ]; then
    [ -n "$output" ] && printf '%s\n' "$output" >&2
    echo "systemd units: failed (ExecStart checked as $binary, $evctl and $bridge, exit status $status)" >&2
    exit 1
fi
echo "systemd units: ok"
