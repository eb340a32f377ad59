#!/usr/bin/env bash
# Builds evstored and evctl of the previous release (the commit Tests/Interop/previous-release
# pins) from the repository's history, for PreviousReleaseTests (docs/testing.md).
#
#   Tests/Interop/build-previous.sh [OUT]     OUT: .build/previous/<hash> by default
#
# Cached: when OUT already holds both binaries, nothing is done. Otherwise the commit's tree
# is extracted with `git archive` (no worktree, no checkout: the index and the work tree
# are left alone) into a scratch directory under .build/previous, built there as a package
# of its own in debug with its own scratch path, so nothing of the current tree and nothing
# of .build/debug takes part; the two binaries are copied to OUT and the scratch directory
# is removed, whether the build passed or failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

pin=Tests/Interop/previous-release
hash=$(grep -E '^[0-9a-f]{40}$' "$pin" | head -n 1 || true)
if [ -z "$hash" ]; then
    echo "build-previous: $pin names no commit (one line of 40 hex digits)" >&2
    exit 1
fi
out=${1:-.build/previous/$hash}

if [ -x "$out/evstored" ] && [ -x "$out/evctl" ]; then
    echo "build-previous: $out holds the previous release's evstored and evctl (commit $hash)"
    exit 0
fi

if ! git cat-file -e "$hash^{commit}" 2>/dev/null; then
    if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
        echo "build-previous: this clone is shallow and lacks commit $hash, the previous release" \
            "($pin); fetch the history with 'git fetch --unshallow' and run again" >&2
    else
        echo "build-previous: this clone lacks commit $hash, the previous release ($pin);" \
            "fetch it from the repository it came from ('git fetch origin') and run again" >&2
    fi
    exit 1
fi

SWIFT=${SWIFT:-swift}
mkdir -p .build/previous
scratch=$(mktemp -d "$PWD/.build/previous/build-$hash.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
echo "build-previous: building evstored and evctl of $hash in $scratch"
git archive --format=tar "$hash" | tar -x -C "$scratch"
for product in evstored evctl; do
    "$SWIFT" build --package-path "$scratch" --scratch-path "$scratch/.build" --product "$product"
done
mkdir -p "$out"
for product in evstored evctl; do
    # Copied under a temporary name, then renamed: OUT never holds a half-written binary.
    cp "$scratch/.build/debug/$product" "$out/.$product.tmp"
    mv "$out/.$product.tmp" "$out/$product"
done
echo "build-previous: $out/evstored and $out/evctl built from $hash"
