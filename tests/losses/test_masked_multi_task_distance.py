"""MaskedMultiTaskDistance (loss): values vs float64, masks, gradients, errors."""

import numpy as np
import pytest

from keras_stable.losses import MaskedMultiTaskDistance
from tests import reference
from tests.backend_utils import MODES
from tests.backend_utils import REDUCTIONS
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import finite_difference
from tests.backend_utils import to_numpy
from tests.backend_utils import value
from tests.backend_utils import vjp_all_modes


def ref_loss(
    y_true,
    y_pred,
    sample_weight=None,
    per="sample",
    squared=False,
    task_weights=None,
    task_mask=None,
    reduction="sum_over_batch_size",
):
    """float64 reference written from the class docstring."""
    y_true = np.asarray(y_true, "float64")
    batch, tasks = y_true.shape
    w = np.ones((batch, tasks))
    outside = None
    if sample_weight is not None:
        sw = np.asarray(sample_weight, "float64")
        if sw.ndim == 2 and sw.shape[1] == 1:
            sw = sw[:, 0]
        if sw.ndim == 2:
            w = w * sw
        elif per == "task":
            w = w * sw[:, None]
        else:
            outside = sw
    if task_mask is not None:
        w = w * np.asarray(task_mask, "float64")
    if task_weights is not None and per == "sample":
        w = w * np.asarray(task_weights, "float64")
    axis = -1 if per == "sample" else 0
    d = reference.masked_task_distance(y_true, y_pred, mask=w, axis=axis, squared=squared)
    observed = ~np.isnan(y_true) & (w > 0)
    active = observed.any(axis=axis)
    weights = np.ones_like(d) if outside is None else outside
    if per == "task" and task_weights is not None:
        weights = np.asarray(task_weights, "float64")
    weights = weights * active
    values = np.where(weights == 0, 0.0, d * weights)
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    if reduction == "mean_with_sample_weight":
        den = weights.sum()
    else:
        den = active.sum()
    return values.sum() / den if den else 0.0


def _data(seed=0, batch=6, tasks=4):
    rng = np.random.default_rng(seed)
    y_true = rng.normal(size=(batch, tasks)).astype("float32")
    y_true[rng.random((batch, tasks)) < 0.3] = np.nan
    y_pred = rng.normal(size=(batch, tasks)).astype("float32")
    return y_true, y_pred, rng


@pytest.mark.parametrize("weights", [None, "1d", "2d"])
@pytest.mark.parametrize("per", ["sample", "task"])
def test_values_match_reference(per, weights):
    y_true, y_pred, rng = _data()
    sw = None
    if weights == "1d":
        sw = rng.uniform(0, 2, size=(6,)).astype("float32")
        sw[2] = 0.0
    elif weights == "2d":
        sw = (rng.random((6, 4)) < 0.6).astype("float32") * 1.5
    for squared in (False, True):
        for reduction in REDUCTIONS:
            kwargs = dict(
                per=per,
                squared=squared,
                task_mask=[True, True, False, True],
                task_weights=[1.0, 0.5, 3.0, 2.0],
                reduction=reduction,
            )
            loss = MaskedMultiTaskDistance(**kwargs)
            expected = ref_loss(y_true, y_pred, sw, **kwargs)
            assert_close(
                to_numpy(loss(y_true, y_pred, sample_weight=sw)), expected, what=str(kwargs)
            )
    # Compiled (XLA / jax.jit) gives the same numbers.
    loss = MaskedMultiTaskDistance(per=per, task_weights=[1.0, 0.5, 3.0, 2.0])
    expected = ref_loss(y_true, y_pred, sw, per=per, task_weights=[1.0, 0.5, 3.0, 2.0])
    for mode in MODES:
        assert_close(value(lambda yp: loss(y_true, yp, sample_weight=sw), [y_pred], mode), expected)


@pytest.mark.parametrize("per", ["sample", "task"])
def test_gradient_matches_finite_differences(per):
    y_true, y_pred, _ = _data(seed=1)
    loss = MaskedMultiTaskDistance(per=per, task_weights=[1.0, 2.0, 0.5, 1.0])
    _, (grad,) = vjp_all_modes(lambda yp: loss(y_true, yp), [y_pred])
    expected = finite_difference(
        lambda yp: ref_loss(y_true, yp, per=per, task_weights=[1.0, 2.0, 0.5, 1.0]), y_pred
    )
    assert_close(grad, expected, tol=(1e-4, 1e-5))


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("per", ["sample", "task"])
def test_masked_entries_get_exactly_zero_gradient(per, squared):
    # Trap 1: all tasks but one switched off; NaN labels under the mask.
    y_true = np.full((5, 4), np.nan, "float32")
    y_true[:, 1] = [1.0, 2.0, 3.0, 4.0, 5.0]
    y_pred = np.ones((5, 4), "float32") * 1e30  # huge values under the mask
    y_pred[:, 1] = 0.0
    loss = MaskedMultiTaskDistance(per=per, squared=squared)
    out, (grad,) = vjp_all_modes(lambda yp: loss(y_true, yp), [y_pred])
    assert_finite(out)
    assert_finite(grad)
    mask = np.zeros((5, 4), bool)
    mask[:, 1] = True
    np.testing.assert_array_equal(grad[~mask], 0.0)
    assert np.all(grad[mask] != 0)


@pytest.mark.parametrize("per", ["sample", "task"])
def test_distance_zero_has_zero_gradient(per):
    # A task whose predictions are perfect: ||0|| and its gradient 0, not NaN.
    y = np.arange(12, dtype="float32").reshape(3, 4)
    loss = MaskedMultiTaskDistance(per=per)
    out, (grad,) = vjp_all_modes(lambda yp: loss(y, yp), [y.copy()])
    assert out == 0.0
    np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("per", ["sample", "task"])
def test_all_masked_batch_gives_zero_and_zero_gradient(per, reduction):
    y_true = np.full((3, 4), np.nan, "float32")
    y_pred = np.ones((3, 4), "float32")
    loss = MaskedMultiTaskDistance(per=per, reduction=reduction)
    out, (grad,) = vjp_all_modes(lambda yp: loss(y_true, yp), [y_pred])
    np.testing.assert_array_equal(out, 0.0)
    np.testing.assert_array_equal(grad, 0.0)
    sw = np.zeros((3, 4), "float32")
    out, (grad,) = vjp_all_modes(
        lambda yp: loss(np.ones((3, 4), "float32"), yp, sample_weight=sw), [y_pred]
    )
    np.testing.assert_array_equal(out, 0.0)
    np.testing.assert_array_equal(grad, 0.0)


def test_switching_tasks_off_does_not_rescale():
    # Averaging over active tasks only: a task switched off (mask or all
    # labels missing) leaves the mean of the others unchanged.
    y_true, y_pred, _ = _data(seed=2)
    y_true = np.nan_to_num(y_true)
    full = MaskedMultiTaskDistance(per="task", reduction="none")(y_true, y_pred)
    off = MaskedMultiTaskDistance(per="task", task_mask=[1, 1, 0, 1])(y_true, y_pred)
    assert_close(off, np.mean(np.asarray(full)[[0, 1, 3]]))
    y_missing = y_true.copy()
    y_missing[:, 2] = np.nan
    assert_close(MaskedMultiTaskDistance(per="task")(y_missing, y_pred), off)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="per"):
        MaskedMultiTaskDistance(per="batch")
    with pytest.raises(ValueError, match="task_weights"):
        MaskedMultiTaskDistance(task_weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="task_mask"):
        MaskedMultiTaskDistance(task_mask=[[True]])
    with pytest.raises(ValueError, match="squared"):
        MaskedMultiTaskDistance(squared="yes")
    with pytest.raises(ValueError, match="reduction"):
        MaskedMultiTaskDistance(reduction="avg")
    y = np.zeros((2, 3), "float32")
    with pytest.raises(ValueError, match=r"task_mask.*2 entries.*\(2, 3\)"):
        MaskedMultiTaskDistance(task_mask=[True, False])(y, y)
    with pytest.raises(ValueError, match=r"y_true.*\(2, 3\).*\(2, 4\)"):
        MaskedMultiTaskDistance()(y, np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match=r"sample_weight.*\(3,\)"):
        MaskedMultiTaskDistance()(y, y, sample_weight=np.ones(3, "float32"))
    with pytest.raises(ValueError, match=r"sample_weight.*\(2, 2\)"):
        MaskedMultiTaskDistance(per="task")(y, y, sample_weight=np.ones((2, 2), "float32"))
