"""StableSigmoidFocalCrossEntropy and StableSoftmaxFocalCrossEntropy.

Keras's number wherever Keras is right (every reduction, sample weights,
class balancing, label smoothing, probabilities), the traps where it is
not, and the argument checks. Config, saving, fit, mixed precision and the
edge grid run in the spec harness (tests/harness/losses.py).
"""

import keras
import numpy as np
import pytest

from keras_stable import ops as stable_ops
from keras_stable.losses import StableSigmoidFocalCrossEntropy
from keras_stable.losses import StableSoftmaxFocalCrossEntropy
from tests import reference
from tests.backend_utils import BACKEND
from tests.backend_utils import REDUCTIONS
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes


def _binary(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(6, 3)) * 3).astype("float32")
    labels = rng.integers(0, 2, (6, 3)).astype("float32")
    sw = rng.uniform(0, 2, 6).astype("float32")
    return labels, logits, sw


def _categorical(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(6, 4)) * 3).astype("float32")
    labels = np.eye(4, dtype="float32")[rng.integers(0, 4, 6)]
    sw = rng.uniform(0, 2, 6).astype("float32")
    return labels, logits, sw


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("alpha", [None, 0.3])
def test_sigmoid_focal_matches_keras(reduction, alpha):
    labels, logits, sw = _binary()
    ours = StableSigmoidFocalCrossEntropy(
        gamma=1.5, alpha=alpha, label_smoothing=0.1, reduction=reduction
    )
    theirs = keras.losses.BinaryFocalCrossentropy(
        apply_class_balancing=alpha is not None,
        alpha=0.25 if alpha is None else alpha,
        gamma=1.5,
        from_logits=True,
        label_smoothing=0.1,
        reduction=reduction,
    )
    for weights in (None, sw):
        assert_close(
            to_numpy(ours(labels, logits, sample_weight=weights)),
            to_numpy(theirs(labels, logits, sample_weight=weights)),
            what=f"{reduction}, weights={weights is not None}",
        )


def test_sigmoid_focal_keras_docstring_examples():
    """The numbers of `keras.losses.BinaryFocalCrossentropy`'s docstring."""
    y_true = np.array([[0, 1], [0, 0]], "float32")
    y_pred = np.array([[-18.6, 0.51], [2.94, -12.8]], "float32")
    assert_close(
        to_numpy(StableSigmoidFocalCrossEntropy(gamma=3)(y_true, y_pred)), 0.647, tol=(1e-3, 1e-3)
    )
    assert_close(
        to_numpy(StableSigmoidFocalCrossEntropy(gamma=3, alpha=0.25)(y_true, y_pred)),
        0.482,
        tol=(1e-3, 1e-3),
    )
    assert_close(
        to_numpy(StableSigmoidFocalCrossEntropy(gamma=3)(y_true, y_pred, sample_weight=[0.8, 0.2])),
        0.133,
        tol=(1e-3, 1e-3),
    )
    out = StableSigmoidFocalCrossEntropy(gamma=5, reduction=None)(y_true, y_pred)
    assert_close(to_numpy(out), [0.0017, 1.1561], tol=(1e-3, 1e-4))


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "mean_with_sample_weight", "none"])
def test_sigmoid_focal_missing_labels_count_for_nothing(reduction):
    """NaN labels are missing, as in StableSigmoidCrossEntropy: out of the
    value, the mean over the last axis and the gradient; an example with no
    label out of the reduction. Keras's loss is NaN even with weight 0."""
    labels = np.array([[1.0, np.nan, 0.0], [np.nan, np.nan, np.nan], [0.0, 1.0, 1.0]], "float32")
    logits = np.array([[0.5, 1e4, -2.5], [1.0, -1e4, 3.0], [40.0, -30.0, 2.0]], "float32")
    sw = np.array([0.5, 3.0, 2.0], "float32")
    theirs = keras.losses.BinaryFocalCrossentropy(gamma=0.5, from_logits=True)
    if BACKEND == "torch":  # it feeds sigmoid(logits) to torch's BCE, which checks targets
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            theirs(labels[[0, 2]], logits[[0, 2]], sample_weight=[0.0, 1.0])
    else:
        plain = theirs(labels[[0, 2]], logits[[0, 2]], sample_weight=[0.0, 1.0])
        assert np.isnan(to_numpy(plain))
    loss = StableSigmoidFocalCrossEntropy(gamma=0.5, alpha=0.3, reduction=reduction)
    out, (grad,) = vjp_all_modes(lambda p: loss(labels, p, sample_weight=sw), [logits])
    observed = ~np.isnan(labels)
    elementwise = np.where(
        observed,
        reference.sigmoid_focal_cross_entropy(np.nan_to_num(labels), logits, 0.5, 0.3),
        0.0,
    )
    per_example = elementwise.sum(-1) / np.maximum(observed.sum(-1), 1)
    valid = observed.any(-1)
    weighted = np.where(valid, per_example * sw, 0.0)
    expected = {
        "sum_over_batch_size": weighted.sum() / valid.sum(),
        "mean_with_sample_weight": weighted.sum() / sw[valid].sum(),
        "none": weighted,
    }[reduction]
    assert_close(out, expected)
    assert_finite(grad)
    np.testing.assert_array_equal(grad[~observed], 0.0)
    assert np.all(grad[observed] != 0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("alpha", [0.25, [0.1, 0.2, 0.3, 0.4]])
def test_softmax_focal_matches_keras(reduction, alpha):
    labels, logits, sw = _categorical()
    ours = StableSoftmaxFocalCrossEntropy(
        gamma=2.0, alpha=alpha, label_smoothing=0.1, reduction=reduction
    )
    theirs = keras.losses.CategoricalFocalCrossentropy(
        alpha=alpha, gamma=2.0, from_logits=True, label_smoothing=0.1, reduction=reduction
    )
    for weights in (None, sw):
        assert_close(
            to_numpy(ours(labels, logits, sample_weight=weights)),
            to_numpy(theirs(labels, logits, sample_weight=weights)),
            what=f"{reduction}, weights={weights is not None}",
        )


def test_keras_defaults_on_probabilities():
    """`CategoricalFocalCrossentropy()` is `(from_logits=False, alpha=0.25)`
    here, `BinaryFocalCrossentropy()` is `(from_logits=False)`: the Keras
    docstring examples."""
    y_true = np.array([[0, 1, 0], [0, 0, 1]], "float32")
    y_pred = np.array([[0.05, 0.95, 0.0], [0.1, 0.8, 0.1]], "float32")
    ours = StableSoftmaxFocalCrossEntropy(from_logits=False, alpha=0.25, reduction=None)(
        y_true, y_pred
    )
    # Keras: [3.2058331e-05, 4.6627346e-01]; its clip moves the first by 1e-7.
    assert_close(to_numpy(ours), [3.2058331e-05, 4.6627346e-01], tol=(1e-5, 1e-6))
    y_true = np.array([[0, 1], [0, 0]], "float32")
    y_pred = np.array([[0.6, 0.4], [0.4, 0.6]], "float32")
    ours = StableSigmoidFocalCrossEntropy(from_logits=False, reduction=None)(y_true, y_pred)
    theirs = keras.losses.BinaryFocalCrossentropy(reduction=None)(y_true, y_pred)
    assert_close(to_numpy(ours), to_numpy(theirs))
    assert_close(to_numpy(ours), [0.330, 0.206], tol=(2e-3, 1e-3))


def test_hard_examples_are_exact_where_keras_clips():
    labels = np.array([[1.0, 0.0, 0.0]], "float32")
    logits = np.array([[0.0, 30.0, -30.0]], "float32")
    keras_value = to_numpy(
        keras.losses.CategoricalFocalCrossentropy(from_logits=True)(labels, logits)
    )
    assert keras_value < 4.1  # every backend
    out, (grad,) = vjp_all_modes(
        lambda x: StableSoftmaxFocalCrossEntropy(alpha=0.25)(labels, x), [logits]
    )
    assert_close(out, 7.5)
    assert_close(grad, [[-0.25, 0.25, 0.0]])
    labels, logits = np.array([[1.0]], "float32"), np.array([[-30.0]], "float32")
    keras_value = to_numpy(keras.losses.BinaryFocalCrossentropy(from_logits=True)(labels, logits))
    if BACKEND != "tensorflow":  # TF recovers the logits behind ops.sigmoid
        assert keras_value < 16.2
    out, (grad,) = vjp_all_modes(lambda x: StableSigmoidFocalCrossEntropy()(labels, x), [logits])
    assert_close(out, 30.0)
    assert_close(grad, [[-1.0]])


@pytest.mark.parametrize("cls", [StableSigmoidFocalCrossEntropy, StableSoftmaxFocalCrossEntropy])
def test_easy_examples_with_gamma_below_one_have_finite_gradients(cls):
    labels = np.array([[1.0, 0.0], [0.0, 1.0]], "float32")
    logits = np.array([[100.0, -100.0], [-40.0, 40.0]], "float32")
    keras_cls = (
        keras.losses.BinaryFocalCrossentropy
        if cls is StableSigmoidFocalCrossEntropy
        else keras.losses.CategoricalFocalCrossentropy
    )
    _, (keras_grad,) = vjp(lambda x: keras_cls(gamma=0.5, from_logits=True)(labels, x), [logits])
    if cls is StableSigmoidFocalCrossEntropy:
        assert np.isnan(keras_grad).any()
    out, (grad,) = vjp_all_modes(lambda x: cls(gamma=0.5)(labels, x), [logits])
    assert_finite(out)
    assert_finite(grad)
    assert np.abs(grad).max() < 1e-15


def test_values_match_reference_in_half_precision():
    labels, logits, _ = _categorical(2)
    for dtype in ("float16", "bfloat16"):
        x = cast_tensor(logits, dtype)
        out = StableSoftmaxFocalCrossEntropy(gamma=0.5, reduction="none")(labels, x)
        assert keras.backend.standardize_dtype(out.dtype) == "float32"
        rounded = to_numpy(x)
        assert_close(to_numpy(out), reference.softmax_focal_cross_entropy(labels, rounded, 0.5))
        out = StableSigmoidFocalCrossEntropy(gamma=0.5, reduction="none")(labels, x)
        assert_close(
            to_numpy(out), reference.sigmoid_focal_cross_entropy(labels, rounded, 0.5).mean(-1)
        )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"gamma": -1.0}, r"`gamma` must be a finite number >= 0, got gamma=-1.0"),
        ({"alpha": 1.5}, r"`alpha` must be in \[0, 1\], got alpha=1.5"),
        ({"alpha": "0.25"}, r"`alpha` must be None, a float in \[0, 1\]"),
        ({"label_smoothing": 1.0}, r"label_smoothing=1.0"),
        ({"from_logits": 1}, r"`from_logits` must be a bool"),
        ({"axis": 1.0}, r"`axis` must be an int"),
        ({"reduction": "avg"}, r"Invalid `reduction`='avg'"),
    ],
)
@pytest.mark.parametrize("cls", [StableSigmoidFocalCrossEntropy, StableSoftmaxFocalCrossEntropy])
def test_bad_arguments_raise_at_construction(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_per_class_alpha_only_for_the_softmax_loss():
    with pytest.raises(ValueError, match=r"`alpha` must be None, a float in \[0, 1\], got \[0.5"):
        StableSigmoidFocalCrossEntropy(alpha=[0.5, 0.5])
    with pytest.raises(ValueError, match=r"`alpha` must be in \[0, 1\], got alpha=2.0"):
        StableSoftmaxFocalCrossEntropy(alpha=[0.5, 2.0])
    loss = StableSoftmaxFocalCrossEntropy(alpha=(0.5, 1))
    assert loss.get_config()["alpha"] == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"`alpha` has 2 entries.*4 classes"):
        loss(*_categorical()[:2])
    with pytest.raises(ValueError, match=r"y_true.shape=\(6, 3\).*y_pred.shape=\(6, 4\)"):
        StableSoftmaxFocalCrossEntropy()(np.zeros((6, 3), "float32"), _categorical()[1])


@pytest.mark.parametrize("cls", [StableSigmoidFocalCrossEntropy, StableSoftmaxFocalCrossEntropy])
def test_gamma_none_is_tf_addons_no_modulating_factor(cls):
    """TF Addons' `gamma=None` (no modulating factor) is `gamma=0`, for the
    classes and the ops alike, and survives `get_config`."""
    y_true = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], "float32")
    y_pred = np.array([[2.0, -1.0, 0.5], [0.3, -4.0, 1.0]], "float32")
    none, zero = cls(gamma=None), cls(gamma=0.0)
    assert_close(to_numpy(none(y_true, y_pred)), to_numpy(zero(y_true, y_pred)))
    assert cls.from_config(none.get_config()).gamma == 0.0
    op = stable_ops.sigmoid_focal_cross_entropy
    assert_close(to_numpy(op(y_true, y_pred, gamma=None)), to_numpy(op(y_true, y_pred, gamma=0.0)))
