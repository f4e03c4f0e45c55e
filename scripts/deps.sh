#!/bin/sh
# Install what building and testing ctxshard needs on Debian 12, when it is
# missing.  Needs root (or sudo) only when something is missing.
set -eu
pkgs="meson ninja-build pkg-config gcc g++ libzstd-dev libxxhash-dev check doxygen python3-numpy binutils python3-torch python3-torchaudio libopenblas0-pthread python3-pip python3-venv python3-mesonpy python3-build openmpi-bin libhdf5-dev python3-h5py libcurl4-openssl-dev nginx curl"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
