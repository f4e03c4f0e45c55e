#!/bin/sh
# libctxshard exports exactly the functions its public headers declare
# (CXS_API), and every exported symbol starts with cxs_.
# usage: symbols.sh LIB HEADER...
set -eu
lib="$1"
shift
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRW]$/ {print $3}' | sort)
leaks=$(echo "$exported" | grep -v '^cxs_' || true)
if [ -n "$leaks" ]; then
    echo "symbols exported without the cxs_ prefix:"; echo "$leaks"; exit 1
fi
declared=$(cat "$@" | tr '\n' ' ' | grep -o 'CXS_API [^;{]*;' | grep -o 'cxs_[a-z0-9_]*(' |
           tr -d '(' | sort -u)
missing=$(echo "$declared" | grep -vxF "$exported" || true)
if [ -n "$missing" ]; then
    echo "declared in the public headers but not exported:"; echo "$missing"; exit 1
fi
extra=$(echo "$exported" | grep -vxF "$declared" || true)
if [ -n "$extra" ]; then
    echo "exported but declared in no public header:"; echo "$extra"; exit 1
fi
echo "$(echo "$exported" | wc -l) exported symbols, all cxs_ and all declared"
