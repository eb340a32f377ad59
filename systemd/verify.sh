#!/bin/sh
# Checks evstored.service and evstored.socket with `systemd-analyze verify`.
# Usage: systemd/verify.sh [EVSTORED]
# EVSTORED is the binary ExecStart is pointed at for the check (the units name
# /usr/bin/evstored, which may not be installed here). Default: the first that exists
# of /usr/bin/evstored, .build/release/evstored (in the repository), /bin/true.
# Works offline: no running systemd is needed. Exits non-zero on any warning or error.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd units: systemd-analyze not found (install the systemd package)" >&2
    exit 2
fi

if [ $# -gt 1 ]; then
    echo "usage: $0 [EVSTORED]" >&2
    exit 64
elif [ $# -eq 1 ]; then
    binary=$1
else
    binary=/bin/true
    for candidate in /usr/bin/evstored "$root/.build/release/evstored"; do
        if [ -x "$candidate" ]; then
            binary=$candidate
            break
        fi
    done
fi
case $binary in
    /*) ;;
    *) binary=$(pwd)/$binary ;;
esac
if [ ! -x "$binary" ] || [ -d "$binary" ]; then
    echo "systemd units: $binary is not an executable file" >&2
    exit 64
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

status=0
output=$(systemd-analyze verify "$work/evstored.service" "$work/evstored.socket" 2>&1) \
    || status=$?

if [ "$status" -ne 0 ] || [ -n "$output" ]; then
    [ -n "$output" ] && printf '%s\n' "$output" >&2
    echo "systemd units: failed (ExecStart checked as $binary, exit status $status)" >&2
    exit 1
fi
echo "systemd units: ok"
