"""Property-based tests: random shapes, axes, masks and dtypes.

For every draw: values agree with the float64 references (rounded to the
dtype), gradients are finite. Eager only (a compiled run per random shape
would be a compile per example); the fixed grids cover compiled == eager.
"""

import numpy as np
import pytest

# Collected everywhere; skipped with this reason where the optional test
# dependency is missing (CI installs it with the `test` extra).
pytest.importorskip("hypothesis", reason="needs hypothesis (pip install -e '.[test]')")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import round_to
from tests.backend_utils import vjp


@st.composite
def problems(draw):
    # A fixed pool of shapes (ranks 1-3, sizes 1-4) keeps eager JAX from
    # compiling every primitive anew for each example.
    shape = draw(st.sampled_from([(4,), (1, 3), (3, 4), (2, 1, 3), (2, 3, 2)]))
    rank = len(shape)
    axis = draw(st.integers(-rank, rank - 1))
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16"]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1.0, 10.0, 100.0]))
    x = rng.normal(size=shape) * scale
    # Sprinkle -inf logits and exact zeros.
    x = np.where(rng.random(shape) < 0.15, -np.inf, x)
    x = np.where(rng.random(shape) < 0.15, 0.0, x)
    mask = rng.random(shape) < 0.7
    return x, axis, mask, dtype, rng


@given(problems())
def test_softmax_family_random(problem):
    x, axis, mask, dtype, _ = problem
    xr = round_to(x, dtype)
    for op, r in (
        (ops.softmax, ref.softmax),
        (ops.log_softmax, ref.log_softmax),
        (ops.logsumexp, ref.logsumexp),
    ):
        out, (g,) = vjp(lambda a, m: op(a, axis=axis, mask=m), [cast_tensor(x, dtype), mask])
        with np.errstate(all="ignore"):
            expected = round_to(r(xr, axis=axis, mask=mask), dtype)
        # Both sides are rounded to the output dtype: the per-dtype tolerance
        # allows one rounding step of difference.
        assert_close(out, expected, dtype, what=op.__name__)
        assert_finite(g, f"{op.__name__} gradient")


@given(problems())
def test_norms_random(problem):
    x, axis, mask, dtype, _ = problem
    x = np.where(np.isfinite(x), x, 0.0)
    xr = round_to(x, dtype)
    out, (g,) = vjp(lambda a: ops.safe_norm(a, axis=axis), [cast_tensor(x, dtype)])
    assert_close(out, round_to(ref.safe_norm(xr, axis=axis), dtype), dtype, what="safe_norm")
    assert_finite(g, "safe_norm gradient")
    out, (g,) = vjp(lambda a: ops.l2_normalize(a, axis=axis), [cast_tensor(x, dtype)])
    assert_close(out, round_to(ref.l2_normalize(xr, axis=axis), dtype), dtype, what="l2_normalize")
    assert_finite(g, "l2_normalize gradient")


@given(problems())
def test_cross_entropies_random(problem):
    x, axis, mask, dtype, rng = problem
    xr = round_to(x, dtype)
    shape = x.shape
    k = shape[axis]
    # Labels only on valid classes (a label on an impossible class is +inf).
    labels_idx = np.argmax(np.where(np.isfinite(x) & mask, rng.random(shape), -1.0), axis=axis)
    onehot = np.moveaxis(np.eye(k)[labels_idx], -1, axis % len(shape))
    out, (g,) = vjp(
        lambda y, a, m: ops.softmax_cross_entropy(y, a, axis=axis, mask=m, label_smoothing=0.1),
        [cast_tensor(onehot, dtype), cast_tensor(x, dtype), mask],
        wrt=(1,),
    )
    expected = ref.softmax_cross_entropy(onehot, xr, axis=axis, mask=mask, label_smoothing=0.1)
    assert_close(out, round_to(expected, dtype), dtype, what="softmax_cross_entropy")
    assert_finite(g, "softmax_cross_entropy gradient")
    out, (g,) = vjp(
        lambda y, a, m: ops.sparse_softmax_cross_entropy(y, a, axis=axis, mask=m, ignore_class=0),
        [labels_idx, cast_tensor(x, dtype), mask],
        wrt=(1,),
    )
    expected = ref.sparse_softmax_cross_entropy(
        labels_idx, xr, axis=axis, mask=mask, ignore_class=0
    )
    assert_close(out, round_to(expected, dtype), dtype, what="sparse_softmax_cross_entropy")
    assert_finite(g, "sparse_softmax_cross_entropy gradient")


@given(problems())
def test_task_distance_random(problem):
    x, axis, mask, dtype, rng = problem
    y_pred = np.where(np.isfinite(x), x, 0.0)
    y_true = np.where(rng.random(x.shape) < 0.2, np.nan, y_pred + rng.normal(size=x.shape))
    for squared in (False, True):
        out, (g,) = vjp(
            lambda t, p, m: ops.masked_task_distance(t, p, mask=m, axis=axis, squared=squared),
            [cast_tensor(y_true, dtype), cast_tensor(y_pred, dtype), mask],
            wrt=(1,),
        )
        expected = ref.masked_task_distance(
            round_to(y_true, dtype), round_to(y_pred, dtype), mask=mask, axis=axis, squared=squared
        )
        assert_close(out, round_to(expected, dtype), dtype, what="masked_task_distance")
        assert_finite(g, "masked_task_distance gradient")
