#!/bin/sh
# Every symbol libctxshard exports starts with cxs_.
lib="$1"
leaks=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRW]$/ {print $3}' | grep -v '^cxs_' || true)
if [ -n "$leaks" ]; then
    echo "symbols exported without the cxs_ prefix:"; echo "$leaks"; exit 1
fi
count=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRW]$/' | grep -c ' cxs_')
echo "$count exported symbols, all cxs_"
[ "$count" -gt 0 ]
