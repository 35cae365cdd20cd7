"""The shape of a softmax output with rows that had nothing left."""

import numpy as np


def distribution_rows(a, empty):
    """`(empty_rows, total_rows)` when `a` (along its last axis) is a
    softmax output with rows that had nothing left: every row is either
    `empty` (all NaN, or all 0) or a distribution (entries in [0, 1]
    summing to 1); `(0, rows)` otherwise."""
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating) or a.ndim == 0 or a.shape[-1] < 2:
        return 0, 0
    rows = a.reshape(-1, a.shape[-1])
    is_empty = np.all(np.isnan(rows), axis=-1) if empty == "nan" else np.all(rows == 0, axis=-1)
    full = rows[~is_empty]
    if not np.any(is_empty) or not np.all(np.isfinite(full)):
        return 0, len(rows)
    if full.size and (
        np.any(full < 0) or np.any(full > 1) or np.max(np.abs(np.sum(full, -1) - 1)) > 1e-3
    ):
        return 0, len(rows)
    return int(np.sum(is_empty)), len(rows)


def nan_row_shape(a):
    """Whether the NaN entries of `a` fill whole rows (along the last axis)."""
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating) or a.ndim == 0 or a.shape[-1] < 2:
        return False
    nan = np.isnan(a)
    return bool(np.any(nan)) and bool(np.all(np.all(nan, -1) == np.any(nan, -1)))
