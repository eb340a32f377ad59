#!/bin/sh
# Tests the evstore Debian package: its size (each binary at most 16 MiB stripped, the
# package at most 8 MiB, no ICU linked in), lintian, then install, upgrade, remove and purge in a
# fresh Debian root made by debootstrap (minbase, plus the package's dependencies only),
# entered with chroot. Checks the files, the evstore user and group, the enabled units,
# the conffile, that the installed binaries run there (so every library they need is
# declared), that the daemon serves as the evstore user, and that remove keeps the data
# while purge deletes it. Given the previous release's package, it then tests the upgrade
# from it in another fresh root: that release installed, its daemon run and its evctl
# writing events, the conffile edited, then DEB installed over it; dpkg must record an
# upgrade, ask nothing, keep the edited conffile and the store, and the new daemon must
# upgrade the store on its first start and read every event the old one wrote.
#
# Usage: [PREVIOUS_DEB=FILE] packaging/test-deb.sh DEB [NATS_DEB]
#   NATS_DEB, the evstore-nats package, is checked the same way and installed after DEB.
#   PREVIOUS_DEB, the previous release's evstore package (packaging/build-previous-deb.sh
#   builds it), adds the upgrade test; its size and lintian are that release's, not checked.
# Needs root (chroot, mount) and debootstrap; the base root is downloaded once into
# DEB_TEST_CACHE (default .build/deb/debootstrap) from DEB_TEST_MIRROR. Without root or
# without the mirror, it says so and exits 0 without testing: the build of the package
# (make deb) and lintian still run.
set -eu

previous_package=${PREVIOUS_DEB:-}
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ ! -f "$1" ] || { [ $# -eq 2 ] && [ ! -f "$2" ]; } \
        || { [ -n "$previous_package" ] && [ ! -f "$previous_package" ]; }; then
    echo "usage: [PREVIOUS_DEB=FILE] $0 DEB [NATS_DEB]" >&2
    exit 64
fi
package=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
bridge_package=
[ $# -eq 2 ] && bridge_package=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ -n "$previous_package" ] \
    && previous_package=$(cd "$(dirname "$previous_package")" && pwd)/$(basename "$previous_package")
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
suite=${DEB_TEST_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
mirror=${DEB_TEST_MIRROR:-http://deb.debian.org/debian}
cache=${DEB_TEST_CACHE:-$repo/.build/deb/debootstrap}
failures=0

check() {
    # check DESCRIPTION COMMAND...: runs the command, counts a failure when it fails.
    description=$1
    shift
    if "$@" >/dev/null 2>&1; then
        echo "  ok    $description"
    else
        echo "  FAIL  $description"
        failures=$((failures + 1))
    fi
}

# What a field device carries: evstored links FoundationEssentials and evctl no Foundation
# at all, not Foundation's full library, which with its ICU data made each of them 57 MiB
# (docs/packaging.md).
max_binary=$((16 * 1024 * 1024))
max_package=$((8 * 1024 * 1024))
echo "size"
for deb in "$package" $bridge_package; do
    contents=$(mktemp -d /tmp/evstore-deb-contents.XXXXXX)
    dpkg-deb -x "$deb" "$contents"
    for file in "$contents"/usr/bin/*; do
        binary=$(basename "$file")
        bytes=$(stat -c %s "$file")
        echo "        /usr/bin/$binary: $bytes bytes ($((bytes / 1024)) KiB)"
        check "$binary is at most 16 MiB stripped" test "$bytes" -le "$max_binary"
        # ICU's data names its items icudtNNl/...; its functions are ucol_, ubrk_, ...
        check "$binary holds no ICU" sh -c "! grep -a -q -e icudt -e ucol_open '$file'"
    done
    rm -rf "$contents"
    bytes=$(stat -c %s "$deb")
    echo "        $(basename "$deb"): $bytes bytes ($((bytes / 1024)) KiB), installed $(dpkg-deb -f "$deb" Installed-Size) KiB"
    check "$(basename "$deb") is at most 8 MiB" test "$bytes" -le "$max_package"
done

for deb in "$package" $bridge_package; do
    echo "lintian $(basename "$deb")"
    # Overrides ship in the package (usr/share/lintian/overrides/NAME), each with its reason.
    # (lintian's notice that it runs as root is not a finding.)
    report=$(lintian --display-level '>=warning' --fail-on none "$deb" 2>&1 \
        | grep -v '^running with root privileges is not recommended' || true)
    if [ -n "$report" ]; then
        printf '%s\n' "$report"
        echo "  FAIL  lintian reports errors or warnings"
        failures=$((failures + 1))
    else
        echo "  ok    no errors or warnings (lintian $(lintian --print-version))"
    fi
done

if [ "$(id -u)" -ne 0 ]; then
    echo "SKIPPED the install test: it needs root for chroot (run: sudo $0 $1)"
    exit "$((failures > 0))"
fi

# The packages' dependencies but evstore itself, which the test installs from its file. The
# previous release's count too: the upgrade root must hold what it needs before this
# release's package comes (when its list is a part of this release's, as 0.4.0's is, the
# cached root is the same).
dependencies=$(for deb in "$package" $bridge_package $previous_package; do dpkg-deb -f "$deb" Depends; echo ,; done \
    | tr ',' '\n' | sed 's/(.*)//; s/|.*//; s/ //g' | grep -v -e '^$' -e '^evstore$' | LC_ALL=C sort -u \
    | paste -sd, -)
if [ ! -f "$cache/.complete" ] || [ "$(cat "$cache/.complete")" != "$suite $dependencies" ]; then
    echo "debootstrap $suite (minbase + $dependencies) into $cache"
    rm -rf "$cache"
    mkdir -p "$cache"
    if ! debootstrap --variant=minbase --include="$dependencies" "$suite" "$cache/root" "$mirror" \
            >"$cache/debootstrap.log" 2>&1; then
        tail -5 "$cache/debootstrap.log"
        rm -rf "$cache/root"
        echo "SKIPPED the install test: debootstrap could not build a root from $mirror"
        exit "$((failures > 0))"
    fi
    echo "$suite $dependencies" >"$cache/.complete"
fi

root=
daemon=
# A copy of the cached base root, in $root, with /proc mounted: each test starts from one.
fresh_root() {
    root=$(mktemp -d /tmp/evstore-deb-root.XXXXXX)
    cp -a "$cache/root/." "$root/"
    mount -t proc proc "$root/proc"
}
# Stops a daemon left running, unmounts and deletes $root. With no root it does nothing
# (an empty $root would name the host's /proc).
drop_root() {
    [ -n "$root" ] || return 0
    stop_daemon
    for mount in proc dev/shm; do
        if mountpoint -q "$root/$mount" 2>/dev/null; then umount -l "$root/$mount"; fi
    done
    rm -rf "$root"
    root=
}
trap drop_root EXIT
trap 'exit 130' INT TERM
inside() { chroot "$root" "$@"; }
# start_daemon LOG: evstored as the evstore user on the packaged config, in the directories
# systemd's StateDirectory= and RuntimeDirectory= would make, its output in /tmp/LOG of the
# root; waits up to 10 s for its socket, which the callers then check.
start_daemon() {
    inside install -d -o evstore -g evstore -m 700 /var/lib/evstore
    inside install -d -o evstore -g evstore -m 750 /run/evstore
    chroot --userspec=evstore:evstore "$root" env STATE_DIRECTORY=/var/lib/evstore \
        RUNTIME_DIRECTORY=/run/evstore /usr/bin/evstored --config /etc/evstore/evstored.json \
        >"$root/tmp/$1" 2>&1 &
    daemon=$!
    tries=0
    while [ ! -S "$root/run/evstore/evstored.sock" ] && [ $tries -lt 200 ]; do
        sleep 0.05
        tries=$((tries + 1))
    done
}
# SIGTERM, and waits: the daemon closes the store and removes its socket before it exits.
stop_daemon() {
    [ -n "$daemon" ] || return 0
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    daemon=
}

fresh_root
cp "$package" "$root/tmp/evstore.deb"

echo "install into a fresh $suite root"
check "dpkg -i installs with only the declared dependencies present" inside dpkg -i /tmp/evstore.deb
check "dpkg reports it installed" sh -c "chroot '$root' dpkg-query -W -f='\${Status}' evstore | grep -qx 'install ok installed'"

echo "files"
for file in /usr/bin/evstored /usr/bin/evctl; do
    check "$file is an executable" test -x "$root$file"
done
check "evstored runs in the fresh root" inside /usr/bin/evstored --version
check "evctl runs in the fresh root" inside /usr/bin/evctl --version
version=$(dpkg-deb -f "$package" Version | sed 's/-[^-]*$//')
check "the binaries' version is the package's ($version)" \
    sh -c "chroot '$root' evctl --version | grep -qx 'evctl $version' && chroot '$root' evstored --version | grep -qx 'evstored $version'"
for unit in evstored.service evstored.socket evstore-metrics.service evstore-metrics.timer; do
    check "unit $unit" test -f "$root/lib/systemd/system/$unit"
done
check "/etc/evstore/evstored.json is a conffile" \
    sh -c "chroot '$root' dpkg-query -W -f='\${Conffiles}' evstore | grep -q '/etc/evstore/evstored.json'"
check "man page evctl(1)" sh -c "zcat '$root/usr/share/man/man1/evctl.1.gz' | grep -q '^\\.TH \"evctl\" \"1\"'"
check "man page evstored(8)" sh -c "zcat '$root/usr/share/man/man8/evstored.8.gz' | grep -q '^\\.TH \"evstored\" \"8\"'"
check "bash completion" test -f "$root/usr/share/bash-completion/completions/evctl"
check "zsh completion" test -f "$root/usr/share/zsh/vendor-completions/_evctl"
check "python client" test -f "$root/usr/lib/python3/dist-packages/evstore/__init__.py"
check "copyright" test -f "$root/usr/share/doc/evstore/copyright"

echo "user and group"
check "system group evstore" sh -c "chroot '$root' getent group evstore"
check "system user evstore in group evstore" sh -c "chroot '$root' id -gn evstore | grep -qx evstore"
check "the user is a system account (uid < 1000)" \
    sh -c "[ \"\$(chroot '$root' id -u evstore)\" -lt 1000 ]"
check "the user's home is /var/lib/evstore and it cannot log in" \
    sh -c "chroot '$root' getent passwd evstore | grep -q ':/var/lib/evstore:/usr/sbin/nologin\$'"

echo "units"
check "evstored.socket is enabled (sockets.target.wants)" \
    test -L "$root/etc/systemd/system/sockets.target.wants/evstored.socket"
check "evstore-metrics.timer is not enabled" \
    test ! -e "$root/etc/systemd/system/timers.target.wants/evstore-metrics.timer"
check "evstored.service is not enabled on its own (the socket starts it)" \
    test ! -e "$root/etc/systemd/system/multi-user.target.wants/evstored.service"

echo "the daemon, as the evstore user, on the systemd directories"
start_daemon evstored.log
check "evstored starts with the default config" test -S "$root/run/evstore/evstored.sock"
check "evctl append through /run/evstore/evstored.sock" \
    inside evctl append job/1 status en_route
check "evctl get returns it" sh -c "chroot '$root' evctl --json get job/1 | grep -q '\"en_route\"'"
check "the store is in /var/lib/evstore, owned by evstore" \
    sh -c "[ \"\$(chroot '$root' stat -c %U /var/lib/evstore/data.mdb)\" = evstore ]"
stop_daemon

if [ -n "$bridge_package" ]; then
    echo "the bridge package, evstore-nats"
    cp "$bridge_package" "$root/tmp/evstore-nats.deb"
    check "dpkg -i installs it beside evstore" inside dpkg -i /tmp/evstore-nats.deb
    check "evstore-nats runs in the fresh root (libnats is there)" inside /usr/bin/evstore-nats --version
    check "its version is the package's" sh -c "chroot '$root' evstore-nats --version | grep -qx 'evstore-nats $version'"
    check "unit evstore-nats.service" test -f "$root/lib/systemd/system/evstore-nats.service"
    check "evstore-nats.service is not enabled (it needs a server URL first)" \
        test ! -e "$root/etc/systemd/system/multi-user.target.wants/evstore-nats.service"
    check "/etc/evstore/evstore-nats.json is a conffile" \
        sh -c "chroot '$root' dpkg-query -W -f='\${Conffiles}' evstore-nats | grep -q '/etc/evstore/evstore-nats.json'"
    check "man page evstore-nats(8)" \
        sh -c "zcat '$root/usr/share/man/man8/evstore-nats.8.gz' | grep -q '^\\.TH \"evstore-nats\" \"8\"'"
    check "a configuration it cannot use exits 78" \
        sh -c "chroot '$root' evstore-nats --config /etc/evstore/evstore-nats.json --prefix 'a.*'; [ \$? -eq 78 ]"
    check "dpkg -P evstore-nats" inside dpkg -P evstore-nats
    check "its config is gone, evstore's stays" \
        sh -c "[ ! -e '$root/etc/evstore/evstore-nats.json' ] && [ -f '$root/etc/evstore/evstored.json' ]"
fi

echo "upgrade (the same package again) keeps an edited conffile"
inside sh -c 'printf "{\"node\": \"van-7\"}\n" >/etc/evstore/evstored.json'
check "dpkg -i again" inside dpkg -i --force-confold /tmp/evstore.deb
check "the edit is kept" grep -q van-7 "$root/etc/evstore/evstored.json"
check "the socket stays enabled" test -L "$root/etc/systemd/system/sockets.target.wants/evstored.socket"

echo "remove keeps the data and the config"
check "dpkg -r" inside dpkg -r evstore
check "the binaries are gone" test ! -e "$root/usr/bin/evstored"
check "the store is kept" test -f "$root/var/lib/evstore/data.mdb"
check "the config is kept" test -f "$root/etc/evstore/evstored.json"

echo "purge deletes them"
check "dpkg -P" inside dpkg -P evstore
check "the store is gone" test ! -e "$root/var/lib/evstore"
check "the config is gone" test ! -e "$root/etc/evstore"
check "no unit stays enabled" test ! -e "$root/etc/systemd/system/sockets.target.wants/evstored.socket"
check "dpkg forgets the package" sh -c "! chroot '$root' dpkg-query -W evstore"

if [ -n "$previous_package" ]; then
    drop_root
    fresh_root
    previous=$(dpkg-deb -f "$previous_package" Version)
    current=$(dpkg-deb -f "$package" Version)
    arch=$(dpkg-deb -f "$package" Architecture)
    cp "$previous_package" "$root/tmp/evstore-previous.deb"
    cp "$package" "$root/tmp/evstore.deb"

    echo "upgrade from the previous release ($previous) in a fresh $suite root"
    check "dpkg -i installs $previous (the root holds its dependencies)" \
        inside dpkg -i /tmp/evstore-previous.deb
    check "dpkg reports $previous installed" \
        sh -c "[ \"\$(chroot '$root' dpkg-query -W -f='\${Status} \${Version}' evstore)\" = 'install ok installed $previous' ]"
    start_daemon evstored-previous.log
    check "its evstored starts with the packaged config" test -S "$root/run/evstore/evstored.sock"
    # Four events on two entities: status moves and a field edit.
    check "its evctl appends 4 events" sh -c "chroot '$root' evctl append job/1 status en_route \
        && chroot '$root' evctl append job/1 set 'address=12 Main St' floor:=3 \
        && chroot '$root' evctl append job/2 status en_route \
        && chroot '$root' evctl append job/1 status delivered"
    inside evctl --json status >"$root/tmp/status-previous.json" 2>&1 || true
    stop_daemon
    node_id=$(sed -n 's/^{"node":{"id":"\([0-9A-Z]*\)".*/\1/p' "$root/tmp/status-previous.json")
    digest=$(sed -n 's/.*"digest":"\([0-9a-f]*\)".*/\1/p' "$root/tmp/status-previous.json")
    check "its evctl status gives the node id and the digest" sh -c "[ -n '$node_id' ] && [ -n '$digest' ]"
    uid=$(inside id -u evstore)
    store_sum=$(md5sum <"$root/var/lib/evstore/data.mdb")
    # Kept aside: after the upgrade it tells whether the store's format moved on.
    cp "$root/usr/bin/evstored" "$root/tmp/evstored-previous"

    # The administrator's edit: a node name and a longer sync interval, keys both releases
    # read (0.4.0 refuses a config with a key it does not know).
    printf '{\n  "node": "van-7",\n  "durability": "full",\n  "sync_interval_s": 45,\n  "peers": []\n}\n' \
        >"$root/etc/evstore/evstored.json"
    cp "$root/etc/evstore/evstored.json" "$root/tmp/evstored.json.edited"

    # dpkg asks about an edited conffile only when the new package's default differs from
    # the one the old package installed (the md5 it recorded). When the default is the same,
    # an upgrade must keep the edit without asking: dpkg runs as apt would run it, with no
    # --force-conf* option, and a closed stdin makes a question fail the install instead of
    # waiting. --force-confold there would hide the very question administrators would get.
    # When the default has changed, the question is dpkg's due: the test answers it as an
    # unattended upgrade does (--force-confold) and expects the new default beside the edit.
    recorded=$(inside dpkg-query -W -f="\${Conffiles}" evstore | awk '$1 == "/etc/evstore/evstored.json" {print $2}')
    shipped=$(dpkg-deb -I "$package" md5sums | awk '$2 == "etc/evstore/evstored.json" {print $1}')
    if [ -n "$recorded" ] && [ "$recorded" = "$shipped" ]; then
        check "dpkg -i installs $current over it, asking nothing (the default config is unchanged)" \
            sh -c "chroot '$root' dpkg -i /tmp/evstore.deb </dev/null >'$root/tmp/dpkg-upgrade.log' 2>&1"
    else
        check "dpkg -i --force-confold installs $current over it (the default config changed)" \
            sh -c "chroot '$root' dpkg -i --force-confold /tmp/evstore.deb </dev/null >'$root/tmp/dpkg-upgrade.log' 2>&1"
        check "the new default is beside it, in evstored.json.dpkg-dist" \
            test -f "$root/etc/evstore/evstored.json.dpkg-dist"
    fi
    sed -n 's/^\(Unpacking evstore .*\)/        \1/p' "$root/tmp/dpkg-upgrade.log"
    check "dpkg unpacks it over $previous" \
        grep -qF "Unpacking evstore ($current) over ($previous)" "$root/tmp/dpkg-upgrade.log"
    check "dpkg's log records the upgrade $previous -> $current" \
        grep -qE " upgrade evstore:$arch $previous $current\$" "$root/var/log/dpkg.log"
    check "dpkg reports $current installed" \
        sh -c "[ \"\$(chroot '$root' dpkg-query -W -f='\${Status} \${Version}' evstore)\" = 'install ok installed $current' ]"
    check "the edited conffile is kept as the administrator left it" \
        cmp "$root/tmp/evstored.json.edited" "$root/etc/evstore/evstored.json"
    check "the evstore user keeps its uid" sh -c "[ \"\$(chroot '$root' id -u evstore)\" = '$uid' ]"
    check "the socket stays enabled" test -L "$root/etc/systemd/system/sockets.target.wants/evstored.socket"
    check "the store is kept in /var/lib/evstore, untouched by dpkg" \
        sh -c "[ \"\$(md5sum <'$root/var/lib/evstore/data.mdb')\" = '$store_sum' ]"

    start_daemon evstored-upgraded.log
    check "the new evstored starts on the kept config and the $previous store" \
        test -S "$root/run/evstore/evstored.sock"
    check "the new evstored says it upgraded the store's format" \
        grep -q "upgraded the store from format [0-9]* to [0-9]*" "$root/tmp/evstored-upgraded.log"
    inside evctl --json status >"$root/tmp/upgraded-status.json" 2>&1 || true
    inside evctl --json log >"$root/tmp/upgraded-log.json" 2>&1 || true
    inside evctl --json get job/1 >"$root/tmp/upgraded-job-1.json" 2>&1 || true
    inside evctl --json get job/2 >"$root/tmp/upgraded-job-2.json" 2>&1 || true
    stop_daemon
    # 0.4.0 kept no commit sequence: the first open's upgrade gives its events seqs 1 to N in
    # id order and writes every projection again with its rev (docs/storage.md); the state
    # hashes, and so the digest, do not change.
    status=$root/tmp/upgraded-status.json
    check "evctl status: the same node ($node_id), named by the kept config (van-7)" \
        grep -qF "{\"node\":{\"id\":\"$node_id\",\"name\":\"van-7\"}" "$status"
    check "evctl status: 4 events, with seqs up to 4 (the upgrade gave them)" \
        sh -c "grep -q '\"events\":4,' '$status' && grep -q '\"seq\":4,' '$status'"
    check "evctl status: the digest $previous reported" grep -qF "\"digest\":\"$digest\"" "$status"
    check "evctl log: the 4 events, seqs 1 to 4 in order" \
        sh -c "[ \"\$(sed -n 's/.*\"seq\":\([0-9]*\).*/\1/p' '$root/tmp/upgraded-log.json' | paste -sd' ' -)\" = '1 2 3 4' ]"
    job=$root/tmp/upgraded-job-1.json
    check "evctl get job/1: delivered, its fields, rev 4" \
        sh -c "grep -qF '\"current\":\"delivered\"' '$job' \
            && grep -qF '\"fields\":{\"address\":\"12 Main St\",\"floor\":3}' '$job' && grep -qF '\"rev\":4' '$job'"
    job=$root/tmp/upgraded-job-2.json
    check "evctl get job/2: en_route, rev 3" \
        sh -c "grep -qF '\"current\":\"en_route\"' '$job' && grep -qF '\"rev\":3' '$job'"
    # The format marker itself: the previous evstored refuses a store of a newer format. On a
    # copy, so the check cannot change the store the test reads.
    inside cp -a /var/lib/evstore /tmp/store-copy
    inside /tmp/evstored-previous --data-dir /tmp/store-copy --socket /tmp/refused.sock \
        >"$root/tmp/evstored-refusal.log" 2>&1 || true
    sed -n 's/.*\(written by a newer evstore (format [0-9]*)\).*/        the previous evstored: "\1"/p' \
        "$root/tmp/evstored-refusal.log"
    check "the store's format is now newer than $previous's (its evstored refuses a copy)" \
        grep -q 'written by a newer evstore' "$root/tmp/evstored-refusal.log"
fi

if [ "$failures" -gt 0 ]; then
    echo "package test: $failures check(s) failed"
    exit 1
fi
echo "package test: every check passed"
