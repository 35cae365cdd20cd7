"""Overlap losses of segmentation: Dice and Tversky, an empty mask scored right.

Both are ratios of soft counts over `axis`; where the denominator is 0 (an
empty target predicted empty, the common "no lesion" image) the ratio is a
perfect match and the loss 0 with a zero gradient, where Keras's `+ 1e-7`
in the denominator makes it 1, the worst score.
"""

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_non_negative
from keras_stable.common.checks import check_same_shape
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape


def _prepare(y_true, y_pred, axis):
    y_true = ops.convert_to_tensor(y_true)
    y_pred = ops.convert_to_tensor(y_pred)
    check_same_shape(y_true, y_pred, "y_true", "y_pred")
    rank = len(static_shape(y_pred))
    axis = check_axis(axis, rank, multiple=True)
    if len(axis) == rank:
        # Every axis: a full reduction (`axis=None`), whose gradient torch
        # broadcasts from a scalar; over an explicit tuple of every axis it
        # broadcasts a (1, 1, 1, 1) tensor (eager Dice 1.27x -> 1.09x
        # Keras's time, docs/benchmarks.md).
        axis = None
    out_dtype = result_float_dtype(dtype_of(y_pred))
    compute = compute_dtype_of(dtype_of(y_pred))
    return ops.cast(y_true, compute), ops.cast(y_pred, compute), axis, out_dtype


def _one_minus_ratio(numerator, denominator):
    """`1 - numerator / denominator`, 0 with zero gradients where the
    denominator is 0 (the numerator, between 0 and the denominator, is 0
    there too).

    The ratio over a denominator raised to 1 where it is 0 (exact
    elsewhere: `+ 0`), and the loss times 0 there: no `0 / 0` in the value
    or the gradient, in arithmetic operators and one cast (two selects of
    Python scalars cost an eager torch loss about 25 us). `1 - n / d`,
    not `(d - n) / d`: with `n` exactly 0 (an empty target) the gradient
    is exactly 0, where `1/d - d/d**2` leaves round-off.
    """
    # The operator, not `ops.not_equal`: Keras's torch backend converts the
    # Python 0 to a tensor on every call.
    nonzero = ops.cast(denominator != 0, dtype_of(denominator))
    # Both counts times a power of two that brings the denominator into
    # [1, 2): exact, and the ratio's gradient `-n / d**2` never squares a
    # tiny denominator (confident background on an empty target, p = 1e-21:
    # d**2 is subnormal, XLA flushes it to 0, and 0 * inf is NaN).
    scale = ops.stop_gradient(_power_of_two_scale(denominator))
    denominator = denominator * scale + (1.0 - nonzero)
    return (1.0 - (numerator * scale) / denominator) * nonzero


def _power_of_two_scale(x):
    """`2**-floor(log2(x))` for `x > 0` (1 elsewhere), its exponent kept
    inside the float32 normal range so the scale itself is finite."""
    positive = x > 0
    exponent = ops.floor(ops.log2(ops.where(positive, x, ops.ones_like(x))))
    return ops.power(2.0, ops.clip(-exponent, -126.0, 126.0))


def dice_loss(y_true, y_pred, axis=None):
    """Dice loss `1 - 2 sum(y_true y_pred) / (sum(y_true) + sum(y_pred))`.

    The formula of `keras.losses.dice`, without its `1e-7`.

    Args:
        y_true: target masks in `[0, 1]` (cast to the dtype of `y_pred`).
        y_pred: predicted probabilities in `[0, 1]`, the shape of `y_true`.
        axis: the axes summed over: an int, a tuple of ints, or None (all
            axes, one number for the batch, as in Keras). `(1, 2, 3)` on
            `(batch, height, width, channels)` gives one loss per image.

    Returns:
        The loss over the remaining axes, in the float dtype of `y_pred`
        (float32 for integers).

    Numerical stability:
        An empty target with an empty prediction (both sums 0) is a perfect
        match: loss 0 and a zero gradient (the ratio is taken over a
        denominator raised to 1 there, and the loss multiplied by 0: no
        `0 / 0` in the value or the gradient), where Keras returns 1. Everywhere else the value and gradient are the
        exact ratio's, finite on all of `[0, 1]` (the denominator is then
        positive). float16/bfloat16 are computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> empty = np.zeros((1, 4), "float32")
        >>> float(ops.dice_loss(empty, empty, axis=1)[0])  # keras.losses.dice: 1.0
        0.0
    """
    y_true, y_pred, axis, out_dtype = _prepare(y_true, y_pred, axis)
    overlap = ops.sum(y_true * y_pred, axis=axis)
    total = ops.sum(y_true, axis=axis) + ops.sum(y_pred, axis=axis)
    return ops.cast(_one_minus_ratio(2.0 * overlap, total), out_dtype)


def tversky_loss(y_true, y_pred, alpha=0.5, beta=0.5, axis=None):
    """Tversky loss `1 - TP / (TP + alpha FP + beta FN)` (Salehi et al.).

    With soft counts `TP = sum(y_true y_pred)`, `FP = sum((1 - y_true)
    y_pred)` (predicted, not in the target) and `FN = sum(y_true (1 -
    y_pred))` (in the target, missed). `alpha = beta = 0.5` is the Dice
    loss; a larger `beta` penalizes missed foreground more (recall).

    Args:
        y_true: target masks in `[0, 1]` (cast to the dtype of `y_pred`).
        y_pred: predicted probabilities in `[0, 1]`, the shape of `y_true`.
        alpha: weight of the false positives, a number >= 0.
        beta: weight of the false negatives, a number >= 0.
        axis: the axes summed over (None: all), as in `dice_loss`.

    Returns:
        The loss over the remaining axes, in the float dtype of `y_pred`
        (float32 for integers).

    Numerical stability:
        Where the denominator is 0 (an empty target predicted empty, or
        only counts whose weight is 0) the loss is 0 with a zero gradient,
        where Keras returns 1; elsewhere the exact ratio, finite on all of
        `[0, 1]`. Keras 3.15.1's `tversky` weights the false negatives by
        `alpha` and the false positives by `beta`: `tversky_loss(t, p,
        alpha=a, beta=b)` equals its `tversky(t, p, alpha=b, beta=a)` up
        to its `1e-7`. float16/bfloat16 are computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> y_true = np.array([[1.0, 1.0, 0.0, 0.0]], "float32")
        >>> y_pred = np.array([[1.0, 0.0, 1.0, 1.0]], "float32")  # TP 1, FP 2, FN 1
        >>> round(float(ops.tversky_loss(y_true, y_pred, alpha=0.25, beta=1.0, axis=1)[0]), 5)
        0.6
    """
    alpha = check_non_negative(alpha, "alpha")
    beta = check_non_negative(beta, "beta")
    y_true, y_pred, axis, out_dtype = _prepare(y_true, y_pred, axis)
    tp = ops.sum(y_true * y_pred, axis=axis)
    # The counts as Keras's products (exactly 0 for a perfect binary
    # prediction). Counted from the sums instead (FP = sum(y_pred) - TP,
    # or one reduction of alpha y_pred + beta y_true), the loss was
    # 0.65-0.8x Keras's time on JAX and torch but 1.1-1.3x on TF under XLA,
    # whose CPU backend runs reductions of anything but a product slower
    # (docs/benchmarks.md).
    fp = ops.sum(y_pred * (1.0 - y_true), axis=axis)
    fn = ops.sum(y_true * (1.0 - y_pred), axis=axis)
    denominator = tp + alpha * fp + beta * fn
    return ops.cast(_one_minus_ratio(tp, denominator), out_dtype)
