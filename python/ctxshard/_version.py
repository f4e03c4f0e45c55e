"""The package's version: the same number as meson.build's project version
(configuring refuses to proceed while they differ), the C library's
cxs_version() and `ctxshard --version`."""
__version__ = "0.3.0"
