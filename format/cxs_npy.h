/* cxs_npy.h - a bounds-checked parser of NumPy .npy headers (format
 * versions 1.0, 2.0 and 3.0).  It reads only the header; the caller reads
 * the body with the description it returns. */
#ifndef CXS_NPY_H
#define CXS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "ctxshard_base.h"

#define CXS_NPY_MAX_DIMS 8

typedef struct cxs_npy {
    int major, minor;
    char kind;          /* 'f', 'i', 'u', 'b', 'U', 'S' */
    int big_endian;     /* byte order of multi-byte elements */
    uint64_t itemsize;  /* bytes per element ('U': 4 per character) */
    int fortran_order;
    int ndim;
    uint64_t shape[CXS_NPY_MAX_DIMS];
    uint64_t count;       /* product of shape */
    uint64_t data_offset; /* first byte of the array data */
    uint64_t data_size;   /* count * itemsize */
} cxs_npy;

/*
 * Parse the header of a .npy file held in p[0..size).  Checks that the data
 * the header promises is exactly what follows it (no overflow, no missing or
 * trailing bytes).  Returns 0, or CXS_E_INPUT with the reason (no path:
 * the caller adds it) in d (NULL allowed).
 */
int cxs_npy_parse(const uint8_t *p, uint64_t size, cxs_npy *out, cxs_diag *d);

/* Write a .npy v1.0 header for a C-order array into buf (capacity cap);
 * returns its length, a multiple of 64, or 0 when it does not fit. */
size_t cxs_npy_header(char *buf, size_t cap, const char *descr, int ndim,
                      const uint64_t *shape);

#endif
