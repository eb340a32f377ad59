#!/bin/sh
# Builds the evstore Debian package from binaries already built, with dpkg-deb and no
# network: the two binaries (statically linked with the Swift runtime), the systemd units,
# the default config as a conffile, the manual pages (scdoc), shell completion, the Python
# client, the maintainer scripts and the docs.
#
# Usage: packaging/build-deb.sh BINDIR OUTDIR
#   BINDIR   holds evstored and evctl (`make deb` builds them with --static-swift-stdlib),
#            and evstore-nats, which makes a second package, evstore-nats, when present
#   OUTDIR   receives evstore_VERSION_ARCH.deb (and evstore-nats_VERSION_ARCH.deb); their
#            staging trees are OUTDIR/root and OUTDIR/root-nats
# The version is the binaries' own (`evstored --version`), which must equal evctl's.
# SOURCE_DATE_EPOCH, when set, dates the changelog and the manual pages. DEB_REVISION (1)
# and DEB_MAINTAINER set the Debian revision and the Maintainer field.
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 BINDIR OUTDIR" >&2
    exit 64
fi
mkdir -p "$2"
bindir=$(cd "$1" && pwd)
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
deb=$here/deb

for tool in dpkg-deb dpkg-shlibdeps scdoc; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "build-deb: $tool not found (apt-get install dpkg-dev scdoc)" >&2
        exit 69
    fi
done
for binary in evstored evctl; do
    if [ ! -x "$bindir/$binary" ]; then
        echo "build-deb: $bindir/$binary is missing; build it first (make deb does)" >&2
        exit 66
    fi
done

version=$("$bindir/evstored" --version | awk '{print $2}')
ctl_version=$("$bindir/evctl" --version | awk '{print $2}')
if [ -z "$version" ] || [ "$version" != "$ctl_version" ]; then
    echo "build-deb: evstored says version '$version' and evctl '$ctl_version'; they must agree" >&2
    exit 65
fi
arch=$(dpkg --print-architecture)
# The Debian revision: the first packaging of this upstream version.
revision=${DEB_REVISION:-1}
maintainer=${DEB_MAINTAINER:-evstore maintainers <maintainers@evstore.example.org>}
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}"

root=$out/root
rm -rf "$root"
rm -f "$out"/evstore_*.deb
mkdir -p "$root/DEBIAN"

# Binaries: stripped (the package is for running; symbols stay in the build tree).
install -d -m 755 "$root/usr/bin"
for binary in evstored evctl; do
    install -m 755 "$bindir/$binary" "$root/usr/bin/$binary"
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/$binary"
done

# systemd units. /lib/systemd/system is where Debian 12 packages put them (the same
# directory as /usr/lib/systemd/system on merged-/usr systems).
install -d -m 755 "$root/lib/systemd/system"
for unit in evstored.service evstored.socket evstore-metrics.service evstore-metrics.timer; do
    install -m 644 "$repo/systemd/$unit" "$root/lib/systemd/system/$unit"
done

# The default config, a conffile: an upgrade keeps the administrator's edits.
install -d -m 755 "$root/etc/evstore"
install -m 644 "$deb/evstored.json" "$root/etc/evstore/evstored.json"
echo /etc/evstore/evstored.json >"$root/DEBIAN/conffiles"

# Manual pages, from the scdoc sources that `evctl --generate-manual` and
# `evstored --generate-manual` keep in step with --help.
install -d -m 755 "$root/usr/share/man/man1" "$root/usr/share/man/man8"
scdoc <"$repo/man/evctl.1.scd" | gzip -9n >"$root/usr/share/man/man1/evctl.1.gz"
scdoc <"$repo/man/evstored.8.scd" | gzip -9n >"$root/usr/share/man/man8/evstored.8.gz"

# Shell completion.
install -d -m 755 "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions"
install -m 644 "$repo/completion/evctl.bash" "$root/usr/share/bash-completion/completions/evctl"
install -m 644 "$repo/completion/_evctl" "$root/usr/share/zsh/vendor-completions/_evctl"

# The Python client, for any python3 (standard library only).
if [ -d "$repo/clients/python/evstore" ]; then
    install -d -m 755 "$root/usr/lib/python3/dist-packages/evstore"
    for file in "$repo"/clients/python/evstore/*.py "$repo"/clients/python/evstore/py.typed; do
        [ -f "$file" ] && install -m 644 "$file" "$root/usr/lib/python3/dist-packages/evstore/"
    done
fi

# Docs, the copyright and the changelog.
doc=$root/usr/share/doc/evstore
install -d -m 755 "$doc/docs"
install -m 644 "$deb/copyright" "$doc/copyright"
install -m 644 "$repo/README.md" "$doc/README.md"
install -m 644 "$repo"/docs/*.md "$doc/docs/"
date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
sed -e "s/@VERSION@/$version-$revision/" -e "s/@DATE@/$date/" -e "s/@MAINTAINER@/$maintainer/" "$deb/changelog" | gzip -9n >"$doc/changelog.Debian.gz"
install -d -m 755 "$root/usr/share/lintian/overrides"
install -m 644 "$deb/lintian-overrides" "$root/usr/share/lintian/overrides/evstore"

# Maintainer scripts.
for script in postinst prerm postrm; do
    install -m 755 "$deb/$script" "$root/DEBIAN/$script"
done

# The shared libraries the binaries under $1 (the staging root) need, as package
# dependencies, printed: dpkg-shlibdeps reads the dpkg database and wants a debian/control
# beside it.
depends_of() {
    shlibs=$out/shlibs
    rm -rf "$shlibs"
    mkdir -p "$shlibs/debian"
    printf 'Source: evstore\n\nPackage: evstore\nArchitecture: any\n' >"$shlibs/debian/control"
    found=$(cd "$shlibs" && dpkg-shlibdeps -O "$1"/usr/bin/* 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
    rm -rf "$shlibs"
    if [ -z "$found" ]; then
        echo "build-deb: dpkg-shlibdeps found no dependencies of $1/usr/bin" >&2
        exit 1
    fi
    # make deb links with -z pack-relative-relocs (DT_RELR), which glibc's loader reads from
    # 2.36 on: the binaries then need the version GLIBC_ABI_DT_RELR, which names no symbol, so
    # dpkg-shlibdeps (it reads symbols) does not see it. Ask for that libc6 at least.
    if readelf -V "$1"/usr/bin/* | grep -q GLIBC_ABI_DT_RELR; then
        libc=$(printf '%s\n' "$found" | sed -n 's/.*libc6 (>= \([^)]*\)).*/\1/p')
        if [ -z "$libc" ]; then
            found="libc6 (>= 2.36), $found"
        elif dpkg --compare-versions "$libc" lt 2.36; then
            found=$(printf '%s\n' "$found" | sed "s/libc6 (>= $libc)/libc6 (>= 2.36)/")
        fi
    fi
    printf '%s\n' "$found"
}

# Writes the control file (from the template $2) and the md5sums of the staging root $1.
control_and_sums() {
    depends=$(depends_of "$1")
    size=$(du -sk --exclude=DEBIAN "$1" | cut -f1)
    sed -e "s/@VERSION@/$version-$revision/" -e "s/@UPSTREAM@/$version/" -e "s/@ARCH@/$arch/" \
        -e "s/@INSTALLED_SIZE@/$size/" -e "s/@DEPENDS@/$depends/" -e "s/@MAINTAINER@/$maintainer/" \
        "$2" >"$1/DEBIAN/control"
    (cd "$1" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
        | xargs -0 md5sum) >"$1/DEBIAN/md5sums"
    chmod 644 "$1/DEBIAN/control" "$1/DEBIAN/conffiles" "$1/DEBIAN/md5sums"
}

control_and_sums "$root" "$deb/control.in"

package=$out/evstore_${version}-${revision}_${arch}.deb
# xz at level 8: its 32 MiB window spans both binaries, so the second one's copy of the
# statically linked Swift runtime is stored as matches against the first (level 6, dpkg's
# default, has an 8 MiB window, shorter than either binary: the package was 1.7 MiB
# larger). Unpacking it needs 33 MiB of memory.
dpkg-deb --root-owner-group -Zxz -z8 --build "$root" "$package" >/dev/null
echo "$package"

# The bridge into NATS JetStream, a package of its own (evstore-nats) for the gateways that
# feed HQ: it links libnats and libcrypto (with libssl and libprotobuf-c), which the devices
# that only replicate need not carry.
[ -x "$bindir/evstore-nats" ] || exit 0
nats_version=$("$bindir/evstore-nats" --version | awk '{print $2}')
if [ "$nats_version" != "$version" ]; then
    echo "build-deb: evstore-nats says version '$nats_version' and evstored '$version'; they must agree" >&2
    exit 65
fi
nats=$deb/nats
root=$out/root-nats
rm -rf "$root"
rm -f "$out"/evstore-nats_*.deb
mkdir -p "$root/DEBIAN"
install -d -m 755 "$root/usr/bin"
install -m 755 "$bindir/evstore-nats" "$root/usr/bin/evstore-nats"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/evstore-nats"
install -d -m 755 "$root/lib/systemd/system"
install -m 644 "$repo/systemd/evstore-nats.service" "$root/lib/systemd/system/evstore-nats.service"
install -d -m 755 "$root/etc/evstore"
install -m 644 "$nats/evstore-nats.json" "$root/etc/evstore/evstore-nats.json"
echo /etc/evstore/evstore-nats.json >"$root/DEBIAN/conffiles"
install -d -m 755 "$root/usr/share/man/man8"
scdoc <"$repo/man/evstore-nats.8.scd" | gzip -9n >"$root/usr/share/man/man8/evstore-nats.8.gz"
doc=$root/usr/share/doc/evstore-nats
install -d -m 755 "$doc"
install -m 644 "$deb/copyright" "$doc/copyright"
sed -e "s/@VERSION@/$version-$revision/" -e "s/@DATE@/$date/" -e "s/@MAINTAINER@/$maintainer/" "$nats/changelog" \
    | gzip -9n >"$doc/changelog.Debian.gz"
install -d -m 755 "$root/usr/share/lintian/overrides"
install -m 644 "$nats/lintian-overrides" "$root/usr/share/lintian/overrides/evstore-nats"
for script in postinst prerm postrm; do
    install -m 755 "$nats/$script" "$root/DEBIAN/$script"
done
control_and_sums "$root" "$nats/control.in"
package=$out/evstore-nats_${version}-${revision}_${arch}.deb
dpkg-deb --root-owner-group -Zxz -z8 --build "$root" "$package" >/dev/null
echo "$package"
