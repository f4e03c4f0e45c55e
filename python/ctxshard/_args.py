"""Argument checks shared by every public function, so that one rule holds
everywhere and every refusal names the function, the argument, the value
and what is allowed:

- integers are Python or numpy integers: a float (even 3.0), a string or a
  bool is refused (TypeError), never truncated or compared;
- negative values are refused where they make no sense (ValueError); frame
  and utterance numbers are never wrapped Python-style (IndexError);
- flags are bools (True/False, numpy bools), not 0/1 or strings;
- paths are str, bytes or os.PathLike."""
import numbers
import re
import os

import numpy as np


def _show(value):
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def integer(func, name, value, lo=None, hi=None, allowed=None, exc=ValueError):
    """value as an int, checked against lo..hi (inclusive; None: unbounded)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        kind = type(value).__name__
        raise TypeError(f"{func}: {name}={_show(value)} is a {kind}, expected an integer"
                        + (f" ({allowed})" if allowed else ""))
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        if allowed is None:
            allowed = (f"{lo}..{hi}" if hi is not None else f"at least {lo}") if lo is not None \
                else f"at most {hi}"
        raise exc(f"{func}: {name}={v} is out of range: expected {allowed}")
    return v


def optional_integer(func, name, value, lo=None, hi=None, allowed=None):
    return None if value is None else integer(func, name, value, lo, hi, allowed)


def flag(func, name, value):
    """A bool; numpy bools too."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{func}: {name}={_show(value)} is a {type(value).__name__}, expected "
                        "True or False")
    return bool(value)


def optional_flag(func, name, value):
    """None (the default: decided by the dataset) or a bool."""
    return None if value is None else flag(func, name, value)


def path(func, name, value):
    """A filesystem path: str, bytes or os.PathLike."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{func}: {name}={_show(value)} is a {type(value).__name__}, expected a "
                        "path (str or os.PathLike)")
    p = os.fspath(value)
    if not p:
        raise ValueError(f"{func}: {name} is empty, expected the path of a packed dataset")
    return p


def index(func, name, value, n, what):
    """A frame or utterance number in 0..n-1 (IndexError otherwise)."""
    return integer(func, name, value, 0, n - 1, exc=IndexError,
                   allowed=f"0..{n - 1} (the dataset has {n} {what})" if n else
                   f"nothing (the dataset has no {what})")


def choice(func, name, value, options):
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{func}: {name}={_show(value)} is not one of "
                         + ", ".join(repr(o) for o in options))
    return value


_SHIFTS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
_SIZE = re.compile(r"(\d+)(\.\d+)?([kKmMgGtT]?)(?:i?[bB]|i)?$")


def size(func, name, value, lo=1):
    """A size in bytes: an integer, or a string as the command line takes
    it ('512M', '2G', '1.5G', '1GiB', '4096'; K, M, G, T are powers of 1024;
    a fraction needs a unit and is rounded down to whole bytes)."""
    if isinstance(value, str):
        m = _SIZE.match(value.strip())
        if not m or (m.group(2) and not m.group(3)):
            raise ValueError(f"{func}: {name}={_show(value)} is not a size: expected bytes (an "
                             "integer) or a string like '512M', '1.5G' or '2G'")
        shift = _SHIFTS[m.group(3).upper()]
        frac = m.group(2)[1:][:9] if m.group(2) else ""
        value = (int(m.group(1)) << shift) + (int(frac or "0") << shift) // 10 ** len(frac)
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{func}: {name}={_show(value)} is a {type(value).__name__}, expected a "
                        "size: bytes (an integer) or a string like '512M' or '2G'")
    v = int(value)
    if v < lo or v >= 2**64:
        raise ValueError(f"{func}: {name}={v} is out of range: expected a size of at least "
                         f"{lo} byte{'s' if lo != 1 else ''}")
    return v
