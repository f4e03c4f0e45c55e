# shellcheck shell=sh
# bench/gpu/deps-env.sh: sourced, then "cxs_deps_env DEBS PREFIX",
# by run-device.sh and by its test.  Unpacks every .deb of DEBS (made by
# bench/gpu/deps.sh) into PREFIX, afresh, fixes what the packages' .pc files
# assume about an installed system, and points pkg-config, the compiler and
# the loader at PREFIX only.  Returns non-zero when DEBS has no .deb.
#
# The fix: Debian 12's libzstd.pc says libdir=${exec_prefix}/lib while the
# library is in lib/<multiarch>.  Installed, the linker finds it in its
# default path anyway; unpacked under a sysroot, `-L PREFIX/usr/lib` is
# empty and the link fails with "cannot find -lzstd" on a machine without
# libzstd-dev.
cxs_deps_env() {
    _debs=$1 _prefix=$2
    ls "$_debs"/*.deb >/dev/null 2>&1 || return 1
    _ma=$(gcc -print-multiarch 2>/dev/null)
    [ -n "$_ma" ] || _ma=x86_64-linux-gnu
    rm -rf "$_prefix"
    mkdir -p "$_prefix"
    for _f in "$_debs"/*.deb; do dpkg-deb -x "$_f" "$_prefix" || return 1; done
    for _pc in "$_prefix"/usr/lib/"$_ma"/pkgconfig/*.pc; do
        [ -f "$_pc" ] || continue
        sed -i -e "s|^libdir=\${exec_prefix}/lib\$|libdir=\${exec_prefix}/lib/$_ma|" \
            -e "s|^libdir=\${prefix}/lib\$|libdir=\${prefix}/lib/$_ma|" "$_pc"
    done
    export LD_LIBRARY_PATH="$_prefix/usr/lib/$_ma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if [ -x "$_prefix/usr/bin/pkgconf" ]; then
        export PKG_CONFIG="$_prefix/usr/bin/pkgconf"
    else
        export PKG_CONFIG=pkg-config
    fi
    export PKG_CONFIG_LIBDIR="$_prefix/usr/lib/$_ma/pkgconfig:$_prefix/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$_prefix"
    # keep -I/-L of PREFIX/usr even though they look like system directories
    export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
    unset PKG_CONFIG_PATH
    # the compiler's own search path too, for headers and libraries that a
    # .pc file leaves to the system directories
    export CPATH="$_prefix/usr/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$_prefix/usr/lib/$_ma${LIBRARY_PATH:+:$LIBRARY_PATH}"
    return 0
}
