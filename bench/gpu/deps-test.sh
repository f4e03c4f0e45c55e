#!/bin/bash
# bench/gpu/deps-test.sh DEBS: run-device.sh's build from unpacked .deb
# files (bench/gpu/deps.sh DEBS) with the system's -dev files hidden
# (overlay whiteouts in a private mount namespace; needs root), as on a GPU
# machine without them: configure and build the library, the command and
# one Check test against the unpacked prefix only.  Exit 77 when DEBS has
# no .deb or the namespace cannot be made.
set -u
debs=$(cd "${1:-.debs}" 2>/dev/null && pwd) || exit 77
ls "$debs"/*.deb >/dev/null 2>&1 || { echo "no .deb in $debs: skipped"; exit 77; }
cd "$(dirname "$0")/../.." || exit 2
[ "$(id -u)" = 0 ] && command -v unshare >/dev/null || { echo "needs root and unshare: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ma=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
for d in /usr/include /usr/lib/$ma; do
    up=$tmp/up$d
    mkdir -p "$up" "$tmp/wk$d"
    dpkg -L libzstd-dev libxxhash-dev check libsubunit-dev 2>/dev/null | grep "^$d/" | while read -r f; do
        [ -d "$f" ] && [ ! -L "$f" ] && continue
        mkdir -p "$up$(dirname "${f#"$d"}")"
        mknod "$up${f#"$d"}" c 0 0
    done
done
unshare -m --propagation private bash -c '
    set -e
    for d in /usr/include /usr/lib/'"$ma"'; do
        mount -t overlay overlay -o lowerdir=$d,upperdir='"$tmp"'/up$d,workdir='"$tmp"'/wk$d $d
    done
    if echo "int main(void){return 0;}" | gcc -x c - -o /dev/null -lzstd 2>/dev/null; then
        echo "libzstd-dev is still visible"; exit 77; fi
    . bench/gpu/deps-env.sh
    cxs_deps_env "'"$debs"'" "'"$tmp"'/prefix"
    meson setup "'"$tmp"'/build" -Dcuda=disabled >"'"$tmp"'/log" 2>&1 &&
    ninja -C "'"$tmp"'/build" tools/ctxshard tests/unit/xsum_test >>"'"$tmp"'/log" 2>&1 ||
        { tail -30 "'"$tmp"'/log"; exit 1; }
    "'"$tmp"'/build/tools/ctxshard" --version
' || exit $?
echo "deps-test: built from the unpacked prefix only"
