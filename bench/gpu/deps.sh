#!/bin/sh
# bench/gpu/deps.sh DIR: download, as .deb files into DIR, the build
# dependencies a GPU machine without network access may lack (headers and
# pkg-config files of zstd, xxHash and Check, and pkgconf itself).  Run it
# on a Debian 12 machine that has the archive; run-device.sh unpacks DIR
# into a private prefix when the libraries are not found.  (dpkg-deb only
# unpacks; nothing is installed on either machine.)
set -eu
dir=${1:?usage: deps.sh DIR}
mkdir -p "$dir"
cd "$dir"
apt-get download libzstd-dev libzstd1 libxxhash-dev libxxhash0 check libsubunit-dev \
    libsubunit0 pkgconf pkgconf-bin libpkgconf3
ls -1 "$PWD"
