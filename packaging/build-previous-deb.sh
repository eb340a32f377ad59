#!/bin/sh
# Builds the Debian package of the previous release (the commit Tests/Interop/previous-release
# pins) from the repository's history, for the upgrade part of packaging/test-deb.sh: an
# upgrade is tested from the package that release actually shipped, not from this tree.
#
# Usage: packaging/build-previous-deb.sh [OUT]     OUT: .build/previous/<hash>/deb by default
#
# Cached: when OUT already holds an evstore_*.deb, nothing is done. Otherwise the commit's
# tree is extracted with `git archive` (no worktree, no checkout: the index and the work
# tree are left alone) into a scratch directory under .build/previous, and built there the
# way that commit's `make deb` built its package: evstored and evctl in release with the
# Swift runtime linked statically and its linker flags, with a scratch path inside the
# scratch directory (nothing of the current tree, .build/release or .build/deb takes part),
# then that commit's own packaging/build-deb.sh from the extracted tree. The package is
# copied to OUT and the scratch directory removed, whether the build passed or failed.
# Needs what `make deb` needs (swift, dpkg-dev, scdoc, liblmdb-dev, libzstd-dev).
set -eu
cd "$(dirname "$0")/.."

pin=Tests/Interop/previous-release
hash=$(grep -E '^[0-9a-f]{40}$' "$pin" | head -n 1 || true)
if [ -z "$hash" ]; then
    echo "build-previous-deb: $pin names no commit (one line of 40 hex digits)" >&2
    exit 1
fi
out=${1:-.build/previous/$hash/deb}

for deb in "$out"/evstore_*.deb; do
    if [ -f "$deb" ]; then
        echo "build-previous-deb: $deb is the previous release's package (commit $hash)"
        exit 0
    fi
done

if ! git cat-file -e "$hash^{commit}" 2>/dev/null; then
    if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
        echo "build-previous-deb: this clone is shallow and lacks commit $hash, the previous release" \
            "($pin); fetch the history with 'git fetch --unshallow' and run again" >&2
    else
        echo "build-previous-deb: this clone lacks commit $hash, the previous release ($pin);" \
            "fetch it from the repository it came from ('git fetch origin') and run again" >&2
    fi
    exit 1
fi

SWIFT=${SWIFT:-swift}
mkdir -p .build/previous
scratch=$(mktemp -d "$PWD/.build/previous/deb-$hash.XXXXXX")
trap 'rm -rf "$scratch" "$scratch.tar"' EXIT
trap 'exit 130' INT TERM
echo "build-previous-deb: building the package of $hash in $scratch"
# Into a file, then extracted: without pipefail, a pipe would hide a failing git archive.
git archive --format=tar -o "$scratch.tar" "$hash"
tar -x -C "$scratch" -f "$scratch.tar"
rm -f "$scratch.tar"

# The flags of that commit's `make deb` (its Makefile's deb target), so the package is the
# one the release shipped: today's Makefile links differently (lld, DT_RELR), and its
# binaries would ask for a newer libc than the 0.4.0 package declared.
for product in evstored evctl; do
    "$SWIFT" build --package-path "$scratch" -c release --static-swift-stdlib -Xlinker -z -Xlinker now \
        --scratch-path "$scratch/.build" --product "$product"
done

# Its build-deb.sh dates the changelog and the manual pages from `git log` of the tree it
# runs in; the extracted tree has no .git of its own, and git would find this repository's
# HEAD above it. The commit's own date is what the release's package carried.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct "$hash")
export SOURCE_DATE_EPOCH
# The release's first Debian revision, whatever revision this shell's DEB_REVISION asks of
# the current package.
DEB_REVISION=1 "$scratch/packaging/build-deb.sh" "$scratch/.build/release" "$scratch/package"

mkdir -p "$out"
for deb in "$scratch"/package/evstore_*.deb; do
    # Copied under a temporary name, then renamed: OUT never holds a half-written package.
    name=$(basename "$deb")
    cp "$deb" "$out/.$name.tmp"
    mv "$out/.$name.tmp" "$out/$name"
    echo "build-previous-deb: $out/$name built from $hash"
done
