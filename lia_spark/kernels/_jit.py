"""numba's ``njit`` with its on-disk cache only where numba can keep one.

numba keys a function's cache on its source file. A module imported from a zip (the wheel given to
``spark-submit --py-files``) has no such file, and ``cache=True`` then fails at import; there the
functions compile once per process instead.
"""
from __future__ import annotations

import functools
import os
from typing import Callable

import numba


def njit_for(source_file: str) -> Callable:
    """``numba.njit`` with ``cache=True`` when ``source_file`` (a module's ``__file__``) is a real file."""
    return functools.partial(numba.njit, cache=os.path.isfile(source_file))
