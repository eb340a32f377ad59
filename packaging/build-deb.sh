#!/bin/sh
# Builds the evstore Debian package from binaries already built, with dpkg-deb and no
# network: the two binaries (statically linked with the Swift runtime), the systemd units,
# the default config as a conffile, the manual pages (scdoc), shell completion, the Python
# client, the maintainer scripts and the docs.
#
# Usage: packaging/build-deb.sh BINDIR OUTDIR
#   BINDIR   holds evstored and evctl (`make deb` builds them with --static-swift-stdlib)
#   OUTDIR   receives evstore_VERSION_ARCH.deb; its staging tree is OUTDIR/root
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

# The shared libraries the binaries need, as package dependencies (dpkg-shlibdeps reads
# the dpkg database; it wants a debian/control beside it).
shlibs=$out/shlibs
rm -rf "$shlibs"
mkdir -p "$shlibs/debian"
printf 'Source: evstore\n\nPackage: evstore\nArchitecture: any\n' >"$shlibs/debian/control"
depends=$(cd "$shlibs" && dpkg-shlibdeps -O "$root/usr/bin/evstored" "$root/usr/bin/evctl" 2>/dev/null \
    | sed -n 's/^shlibs:Depends=//p')
if [ -z "$depends" ]; then
    echo "build-deb: dpkg-shlibdeps found no dependencies" >&2
    exit 1
fi
rm -rf "$shlibs"
# make deb links with -z pack-relative-relocs (DT_RELR), which glibc's loader reads from
# 2.36 on: the binaries then need the version GLIBC_ABI_DT_RELR, which names no symbol, so
# dpkg-shlibdeps (it reads symbols) does not see it. Ask for that libc6 at least.
if readelf -V "$root/usr/bin/evstored" "$root/usr/bin/evctl" | grep -q GLIBC_ABI_DT_RELR; then
    libc=$(printf '%s\n' "$depends" | sed -n 's/.*libc6 (>= \([^)]*\)).*/\1/p')
    if [ -z "$libc" ]; then
        depends="libc6 (>= 2.36), $depends"
    elif dpkg --compare-versions "$libc" lt 2.36; then
        depends=$(printf '%s\n' "$depends" | sed "s/libc6 (>= $libc)/libc6 (>= 2.36)/")
    fi
fi

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version-$revision/" -e "s/@ARCH@/$arch/" -e "s/@INSTALLED_SIZE@/$size/" \
    -e "s/@DEPENDS@/$depends/" -e "s/@MAINTAINER@/$maintainer/" "$deb/control.in" >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
    | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

package=$out/evstore_${version}-${revision}_${arch}.deb
# xz at level 8: its 32 MiB window spans both binaries, so the second one's copy of the
# statically linked Swift runtime is stored as matches against the first (level 6, dpkg's
# default, has an 8 MiB window, shorter than either binary: the package was 1.7 MiB
# larger). Unpacking it needs 33 MiB of memory.
dpkg-deb --root-owner-group -Zxz -z8 --build "$root" "$package" >/dev/null
echo "$package"
