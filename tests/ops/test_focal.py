"""The focal cross-entropies against float64 references, on their traps.

Each trap is a test that fails on the Keras built-in (where it fails) and
passes on keras_stable: a hard example with saturated logits (Keras clips
the probability at 1e-7), and an easy example with `gamma < 1` (the
derivative of `(1 - p)**gamma` is infinite once `1 - p` rounds to 0).
Values run in float32, float16 and bfloat16, eagerly and compiled.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import BACKEND
from tests.backend_utils import DTYPES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_enabled
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes


def _sigmoid_data(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(4, 5)) * 4).astype("float32")
    labels = rng.integers(0, 2, (4, 5)).astype("float32")
    labels[0] = [0.1, 0.9, 0.5, 0.0, 1.0]  # soft labels (label smoothing)
    return labels, logits


def _softmax_data(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(4, 5)) * 3).astype("float32")
    labels = rng.dirichlet(np.ones(5), size=4).astype("float32")
    labels[1] = np.eye(5)[2]
    return labels, logits


# --- values against float64, every dtype, eager and compiled -----------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gamma, alpha", [(2.0, None), (0.5, 0.25), (0.0, None), (3.0, 0.9)])
def test_sigmoid_focal_matches_reference(dtype, gamma, alpha):
    labels, logits = _sigmoid_data()
    logits[1, :3] = [-30.0, 40.0, 100.0]  # saturated hard and easy examples
    labels[1, :3] = 1.0

    def fn(x):
        return ops.sigmoid_focal_cross_entropy(labels, x, gamma=gamma, alpha=alpha)

    out, (grad,) = vjp_all_modes(fn, [cast_tensor(logits, dtype)], dtype=dtype)
    expected = ref.sigmoid_focal_cross_entropy(labels, round_to(logits, dtype), gamma, alpha)
    assert_close(out, round_to(expected, dtype), dtype)
    assert_finite(grad, f"gradient in {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "gamma, alpha, smoothing",
    [(2.0, None, 0.0), (0.5, 0.25, 0.1), (0.0, [0.1, 0.2, 0.3, 0.4, 1.0], 0.0)],
)
def test_softmax_focal_matches_reference(dtype, gamma, alpha, smoothing):
    labels, logits = _softmax_data()
    logits[2] = [0.0, 30.0, -30.0, 5.0, -200.0]  # saturated softmax
    labels[2] = [1.0, 0.0, 0.0, 0.0, 0.0]
    logits[3, 4] = -np.inf  # a zero label on an impossible class
    labels[3] = [0.2, 0.3, 0.5, 0.0, 0.0]

    def fn(x):
        return ops.softmax_focal_cross_entropy(
            labels, x, gamma=gamma, alpha=alpha, label_smoothing=smoothing
        )

    out, (grad,) = vjp_all_modes(fn, [cast_tensor(logits, dtype)], dtype=dtype)
    expected = ref.softmax_focal_cross_entropy(
        labels, round_to(logits, dtype), gamma, alpha, label_smoothing=smoothing
    )
    assert_close(out, round_to(expected, dtype), dtype)
    assert_finite(grad, f"gradient in {dtype}")
    if not smoothing:
        assert grad[3, 4] == 0.0


@pytest.mark.parametrize(
    "fn, reference, data",
    [
        (
            lambda y, x: ops.sigmoid_focal_cross_entropy(y, x, gamma=0.5, alpha=0.3),
            lambda y, x: ref.sigmoid_focal_cross_entropy(y, x, 0.5, 0.3),
            _sigmoid_data,
        ),
        (
            lambda y, x: ops.sigmoid_focal_cross_entropy(y, x, gamma=2.0),
            lambda y, x: ref.sigmoid_focal_cross_entropy(y, x, 2.0),
            _sigmoid_data,
        ),
        (
            lambda y, x: ops.softmax_focal_cross_entropy(
                y, x, gamma=0.5, alpha=0.25, label_smoothing=0.1
            ),
            lambda y, x: ref.softmax_focal_cross_entropy(y, x, 0.5, 0.25, label_smoothing=0.1),
            _softmax_data,
        ),
        (
            lambda y, x: ops.softmax_focal_cross_entropy(y, x, gamma=2.0, axis=0),
            lambda y, x: ref.softmax_focal_cross_entropy(y, x, 2.0, axis=0),
            _softmax_data,
        ),
    ],
    ids=["sigmoid_g0.5", "sigmoid_g2", "softmax_g0.5", "softmax_axis0"],
)
def test_gradient_equals_finite_differences_in_float64(fn, reference, data):
    labels, logits = data(3)
    # Labels inside (0, 1): a central difference at a hard label steps out of
    # [0, 1], where the focal factor of a saturated logit is undefined.
    labels = np.clip(labels, 0.02, 0.98).astype("float64")
    with float64_enabled():
        _, grads = vjp(fn, [labels, logits.astype("float64")], wrt=(0, 1))
    for i, g in enumerate(grads):

        def partial(v, i=i):
            args = [labels, logits.astype("float64")]
            args[i] = v
            return reference(*args)

        fd = finite_difference(partial, [labels, logits][i])
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7, err_msg=f"argument {i}")


def test_output_dtype_is_input_dtype():
    for dtype in DTYPES:
        x = cast_tensor(np.zeros((2, 3)), dtype)
        for out in (ops.sigmoid_focal_cross_entropy(x, x), ops.softmax_focal_cross_entropy(x, x)):
            assert keras.backend.standardize_dtype(out.dtype) == dtype


# --- the traps: Keras fails (where it does), keras_stable is exact ------------


def test_sigmoid_focal_hard_example_is_exact():
    """Logit -30 with label 1: the loss is 30; Keras clips sigmoid(-30) at
    1e-7 and reports 16.1 with a wrong gradient (on JAX and torch; TF
    recovers the logits)."""
    labels, logits = np.array([[1.0]], "float32"), np.array([[-30.0]], "float32")
    keras_loss = keras.losses.BinaryFocalCrossentropy(from_logits=True, reduction="none")
    _, (keras_grad,) = vjp(lambda x: keras_loss(labels, x), [logits])
    keras_value = to_numpy(keras_loss(labels, logits))
    if BACKEND != "tensorflow":
        assert keras_value[0] < 16.2
        assert abs(keras_grad[0, 0]) < 0.5  # the exact gradient is -1
    out, (grad,) = vjp_all_modes(lambda x: ops.sigmoid_focal_cross_entropy(labels, x), [logits])
    assert_close(out, [[30.0]])
    assert_close(grad, [[-1.0]], tol=(1e-5, 1e-6))


@pytest.mark.parametrize("gamma", [0.0, 0.25, 0.5, 0.9, 1.0, 2.0])
def test_sigmoid_focal_easy_example_gradient_is_finite_and_exact(gamma):
    """Logits +40 and +100 with label 1: `d/dx (1 - p)**gamma` is NaN in
    Keras for `gamma < 1` (`1 - p` rounds to 0); here the gradient is the
    true one, `-(1 + gamma) exp(-(1 + gamma) x)` to leading order."""
    labels = np.ones((1, 2), "float32")
    logits = np.array([[40.0, 100.0]], "float32")
    if 0 < gamma < 1:
        keras_loss = keras.losses.BinaryFocalCrossentropy(gamma=gamma, from_logits=True)
        _, (keras_grad,) = vjp(lambda x: keras_loss(labels, x), [logits])
        assert np.isnan(keras_grad).any()
    out, (grad,) = vjp_all_modes(
        lambda x: ops.sigmoid_focal_cross_entropy(labels, x, gamma=gamma), [logits]
    )
    assert_finite(grad)
    with float64_enabled():
        x64 = logits.astype("float64")
        fd = finite_difference(
            lambda v: ref.sigmoid_focal_cross_entropy(labels, v, gamma), x64, eps=1e-4
        )
    # float32 holds the gradient at +40 (~1e-18 .. 1e-35); at +100 it is a
    # denormal or 0 (and the float64 differences cannot resolve it).
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1.2e-38)
    assert_close(out, ref.sigmoid_focal_cross_entropy(labels, logits, gamma), tol=(1e-5, 1.2e-38))


def test_softmax_focal_hard_example_is_exact():
    """Logits [0, 30, -30] with label 0: 7.5 with alpha=0.25; Keras clips the
    softmax at 1e-7 and reports 4.03 with a zero gradient (every backend)."""
    labels = np.array([[1.0, 0.0, 0.0]], "float32")
    logits = np.array([[0.0, 30.0, -30.0]], "float32")
    keras_loss = keras.losses.CategoricalFocalCrossentropy(from_logits=True, reduction="none")
    keras_value = to_numpy(keras_loss(labels, logits))
    assert keras_value[0] < 4.1
    out, (grad,) = vjp_all_modes(
        lambda x: ops.softmax_focal_cross_entropy(labels, x, alpha=0.25), [logits]
    )
    assert_close(out, [7.5])
    # d/dx of 0.25 (1 - p0)^2 (-log p0) with p0 = e^-30, p1 ~ 1: [-0.25, 0.25, ~0].
    assert_close(grad, [[-0.25, 0.25, 0.0]], tol=(1e-5, 1e-6))


@pytest.mark.parametrize("gamma", [0.25, 0.5, 2.0])
def test_softmax_focal_easy_example_gradient_is_finite(gamma):
    labels = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], "float32")
    logits = np.array([[0.0, 100.0, -30.0], [60.0, 0.0, 0.0]], "float32")
    out, (grad,) = vjp_all_modes(
        lambda x: ops.softmax_focal_cross_entropy(labels, x, gamma=gamma), [logits]
    )
    assert_finite(grad)
    expected = ref.softmax_focal_cross_entropy(labels, logits, gamma)
    # Values below 1.2e-38 are denormals (flushed to 0 by XLA).
    assert_close(out, expected, tol=(1e-5, 1.2e-38))
    with float64_enabled():
        fd = finite_difference(
            lambda v: ref.softmax_focal_cross_entropy(labels, v, gamma),
            logits.astype("float64"),
            eps=1e-4,
        )
    # Below 1e-38 the float32 gradient is a denormal.
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-38)


def test_softmax_focal_single_class_and_fully_masked_rows():
    labels = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], "float32")
    logits = np.array([[3.0, -np.inf, -np.inf], [1.0, 2.0, 3.0]], "float32")
    mask = np.array([[True, True, True], [False, False, False]])
    for gamma in (0.0, 0.5, 2.0):
        out, (grad,) = vjp_all_modes(
            lambda x, g=gamma: ops.softmax_focal_cross_entropy(labels, x, gamma=g, mask=mask),
            [logits],
        )
        np.testing.assert_array_equal(out, [0.0, 0.0])  # p = 1 exactly; no class left
        np.testing.assert_array_equal(grad, 0.0)


def test_sigmoid_labels_outside_the_unit_interval_give_nan():
    labels = np.array([[-0.5, 1.5, np.nan, 1.0]], "float32")
    logits = np.zeros((1, 4), "float32")
    for gamma in (0.0, 2.0):
        out = to_numpy(ops.sigmoid_focal_cross_entropy(labels, logits, gamma=gamma))
        assert np.isnan(out[0, :3]).all() and np.isfinite(out[0, 3])


def test_nonzero_label_on_impossible_class_is_inf():
    labels = np.array([[0.5, 0.5, 0.0]], "float32")
    logits = np.array([[0.0, -np.inf, 1.0]], "float32")
    out, (grad,) = vjp_all_modes(lambda x: ops.softmax_focal_cross_entropy(labels, x), [logits])
    assert out[0] == np.inf
    assert_finite(grad)
    # With alpha = 0 on that class the label has no weight there.
    out = to_numpy(ops.softmax_focal_cross_entropy(labels, logits, alpha=[1.0, 0.0, 1.0]))
    assert np.isfinite(out).all()


# --- Keras parity where Keras is right ------------------------------------------


@pytest.mark.parametrize(
    "gamma, alpha, smoothing",
    [(2.0, None, 0.0), (0.5, 0.25, 0.0), (3.0, 0.6, 0.2), (0.0, None, 0.1)],
)
def test_sigmoid_focal_matches_keras_on_moderate_inputs(gamma, alpha, smoothing):
    labels, logits = _sigmoid_data(5)
    labels = np.round(labels)
    balanced = alpha is not None
    keras_loss = keras.losses.BinaryFocalCrossentropy(
        apply_class_balancing=balanced,
        alpha=alpha if balanced else 0.25,
        gamma=gamma,
        from_logits=True,
        label_smoothing=smoothing,
        reduction="none",
    )
    smoothed = labels * (1 - smoothing) + 0.5 * smoothing
    ours = np.mean(
        to_numpy(ops.sigmoid_focal_cross_entropy(smoothed, logits, gamma=gamma, alpha=alpha)), -1
    )
    assert_close(ours, to_numpy(keras_loss(labels, logits)), tol=(1e-5, 1e-6))
    probs = 1 / (1 + np.exp(-logits.astype("float64")))
    probs = np.clip(probs, 0.01, 0.99).astype("float32")  # where Keras's clip is inactive
    keras_probs = keras.losses.BinaryFocalCrossentropy(
        apply_class_balancing=balanced,
        alpha=alpha if balanced else 0.25,
        gamma=gamma,
        label_smoothing=smoothing,
        reduction="none",
    )
    ours = np.mean(
        to_numpy(
            ops.sigmoid_focal_cross_entropy(
                smoothed, probs, gamma=gamma, alpha=alpha, from_logits=False
            )
        ),
        -1,
    )
    assert_close(ours, to_numpy(keras_probs(labels, probs)), tol=(1e-5, 1e-6))


@pytest.mark.parametrize(
    "gamma, alpha, smoothing",
    [(2.0, 0.25, 0.0), (0.5, [0.1, 0.2, 0.3, 0.4, 0.5], 0.0), (1.0, 1.0, 0.1)],
)
def test_softmax_focal_matches_keras_on_moderate_inputs(gamma, alpha, smoothing):
    labels, logits = _softmax_data(7)
    keras_loss = keras.losses.CategoricalFocalCrossentropy(
        alpha=alpha, gamma=gamma, from_logits=True, label_smoothing=smoothing, reduction="none"
    )
    ours = ops.softmax_focal_cross_entropy(
        labels, logits, gamma=gamma, alpha=alpha, label_smoothing=smoothing
    )
    assert_close(to_numpy(ours), to_numpy(keras_loss(labels, logits)), tol=(1e-5, 1e-6))
    probs = np.exp(ref.log_softmax(logits)).astype("float32")
    assert probs.min() > 1e-6  # Keras's clip is inactive
    keras_probs = keras.losses.CategoricalFocalCrossentropy(
        alpha=alpha, gamma=gamma, label_smoothing=smoothing, reduction="none"
    )
    ours = ops.softmax_focal_cross_entropy(
        labels, probs, gamma=gamma, alpha=alpha, label_smoothing=smoothing, from_logits=False
    )
    assert_close(to_numpy(ours), to_numpy(keras_probs(labels, probs)), tol=(1e-5, 1e-6))


# --- bad input ------------------------------------------------------------------

x23 = np.zeros((2, 3), "float32")


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: ops.sigmoid_focal_cross_entropy(x23, x23, gamma=-0.5),
            r"`gamma` must be a finite number >= 0, got gamma=-0.5",
        ),
        (lambda: ops.softmax_focal_cross_entropy(x23, x23, gamma=float("inf")), r"`gamma`"),
        (
            lambda: ops.softmax_focal_cross_entropy(x23, x23, gamma="2"),
            r"`gamma` must be a finite number",
        ),
        (
            lambda: ops.sigmoid_focal_cross_entropy(x23, x23, alpha=1.5),
            r"`alpha` must be in \[0, 1\], got alpha=1.5",
        ),
        (
            lambda: ops.sigmoid_focal_cross_entropy(x23, x23, alpha=-0.1),
            r"`alpha` must be in \[0, 1\]",
        ),
        (
            lambda: ops.sigmoid_focal_cross_entropy(x23, x23, alpha=[0.5, 0.5, 0.5]),
            r"`alpha` must be None, a float in \[0, 1\], got",
        ),
        (lambda: ops.sigmoid_focal_cross_entropy(x23, x23, alpha=True), r"`alpha`"),
        (
            lambda: ops.softmax_focal_cross_entropy(x23, x23, alpha=[0.5, 2.0, 0.5]),
            r"`alpha` must be in \[0, 1\], got alpha=2.0",
        ),
        (
            lambda: ops.softmax_focal_cross_entropy(x23, x23, alpha=[0.5, 0.5]),
            r"`alpha` has 2 entries.*3 classes",
        ),
        (
            lambda: ops.softmax_focal_cross_entropy(x23, x23, alpha=[]),
            r"`alpha` must not be an empty list",
        ),
        (
            lambda: ops.softmax_focal_cross_entropy(np.ones((2, 4), "float32"), x23),
            r"labels.shape=\(2, 4\).*logits.shape=\(2, 3\)",
        ),
        (
            lambda: ops.sigmoid_focal_cross_entropy(np.ones((3, 2), "float32"), x23),
            r"labels.shape=\(3, 2\)",
        ),
        (lambda: ops.softmax_focal_cross_entropy(x23, x23, axis=2), r"`axis`=2"),
        (
            lambda: ops.softmax_focal_cross_entropy(x23, x23, label_smoothing=1.0),
            r"label_smoothing=1.0",
        ),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
