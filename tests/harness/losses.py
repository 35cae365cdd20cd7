"""The loss and metric checks of the spec harness.

Each loss or metric is described by a `LossSpec` (`tests/specs/losses.py`):
how to build it, a tiny data set for a model with `outputs` units, and an
edge-case grid of `(y_true, y_pred)` pairs whose value (and, for losses,
gradient) must be finite. The `check_*` functions below are the harness of
CONTRIBUTING.md ("Add a loss"), run for every spec by `tests/test_harness.py`:
config round trip and identical behaviour after it, `.keras` save/load with
identical values, one `fit` step with `jit_compile=True` (not on torch),
the mixed-precision sweep, the edge-case grid, and the Keras mask of a
`Masking` layer. The machinery they share with the layer checks is in
`tests/harness/common.py`.
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np
import pytest

from keras_stable.common.checks import exposed_logits
from tests.backend_utils import assert_finite
from tests.backend_utils import dtype_of
from tests.backend_utils import to_numpy
from tests.harness import common


@dataclasses.dataclass
class LossSpec:
    """How to exercise one loss or metric class."""

    id: str
    cls: type
    kwargs: dict
    outputs: int
    make_y: Callable  # rng, n -> y (labels of a model with `outputs` units)
    edge_cases: list  # [(y_true, y_pred)] with finite value and gradient
    sample_weight: Callable = None  # rng, n -> sample weights, or None
    # Metrics only: the loss a model carrying the metric trains with.
    train_loss: Callable = None
    # masking -> a model on (n, 4) inputs (Masking first when asked);
    # None: a Dense head with `outputs` units.
    model: Callable = None
    # A loss whose value is one number per batch (its samples are compared
    # with each other): its edge cases are run one by one, not stacked.
    batch_level: bool = False
    # The axis of y_pred that indexes the samples ((2, batch, dim) views: 1).
    pred_batch_axis: int = 0
    # Where the Keras-mask contract is checked instead, when a mask of whole
    # samples is not how the class reads it (CTC: a mask of frames).
    keras_mask: str = None

    def make(self, **overrides):
        return self.cls(**{**self.kwargs, **overrides})

    def data(self, n=8, seed=0):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, 4)).astype("float32")
        y = self.make_y(rng, n)
        sw = None if self.sample_weight is None else self.sample_weight(rng, n)
        return x, y, sw

    def __repr__(self):
        return self.id


# --- helpers -------------------------------------------------------------------


def is_metric(obj):
    return isinstance(obj, keras.metrics.Metric)


def spec_model(spec, masking=False):
    """The model whose predictions the spec's class reads."""
    keras.utils.set_random_seed(0)
    if spec.model is not None:
        return spec.model(masking)
    return common.dense_model(
        (4,), spec.outputs, masking=masking, activation=_activation(spec), name="head"
    )


def _activation(spec):
    if spec.kwargs.get("log_input") is False:
        return "softplus"  # Poisson rates must be >= 0
    if spec.kwargs.get("from_logits") is not False:
        return None
    return (
        "sigmoid"
        if spec.cls.__name__.endswith(
            ("SigmoidCrossEntropy", "BinaryCrossEntropy", "SigmoidFocalCrossEntropy")
        )
        else "softmax"
    )


def evaluate(obj, y_true, y_pred, sample_weight=None):
    """A loss value, or a fresh metric's result after one update."""
    if is_metric(obj):
        obj.reset_state()
        obj.update_state(y_true, y_pred, sample_weight=sample_weight)
        return to_numpy(obj.result())
    return to_numpy(obj(y_true, y_pred, sample_weight=sample_weight))


def loss_and_metrics(spec):
    """What a model compiles with: the spec's loss, or (metrics) the loss
    their spec names, so the model can train, and the metric."""
    obj = spec.make()
    if is_metric(obj):
        return spec.train_loss(), [obj]
    return obj, None


def _flat_metrics(model):
    out = []
    stack = list(model.metrics)
    while stack:
        m = stack.pop()
        out.append(m)
        stack.extend(getattr(m, "metrics", []) or [])
    return out


# --- the checks --------------------------------------------------------------------


def check_config_round_trip(spec):
    """get_config holds every argument, and the copy behaves identically."""
    obj = spec.make()
    keys = ["name", "dtype"] + ([] if is_metric(obj) else ["reduction"])
    x, y, sw = spec.data()
    y_pred = spec_model(spec)(x)
    expected = common.check_config_round_trip(
        obj, spec.kwargs, lambda o: evaluate(o, y, y_pred, sw), keys=keys
    )
    assert_finite(expected, spec.id)


def check_keras_save_load(spec, tmp_path):
    """A compiled tiny model saved as `.keras` reloads with safe_mode=True
    and gives identical loss and metric values."""
    x, y, sw = spec.data()
    model = spec_model(spec)
    loss, metrics = loss_and_metrics(spec)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss, metrics=metrics)
    before = model.evaluate(x, y, sample_weight=sw, verbose=0, return_dict=True)
    loaded = common.save_and_reload(model, tmp_path, spec.id)
    after = loaded.evaluate(x, y, sample_weight=sw, verbose=0, return_dict=True)
    assert set(before) == set(after), (before, after)
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-6, err_msg=key)
        assert np.isfinite(before[key]), (key, before)
    if metrics:
        types = [type(m).__name__ for m in _flat_metrics(loaded)]
        assert spec.cls.__name__ in types, types
    else:
        assert type(loaded.loss) is spec.cls


def check_fit_step(spec):
    """One fit step, jit-compiled where the backend supports it."""
    x, y, sw = spec.data()
    loss, metrics = loss_and_metrics(spec)
    common.fit_one_step(spec_model(spec), x, y, loss, metrics, sample_weight=sw)


def check_precision_sweep(spec, policy):
    """Under a mixed policy the model's predictions are half precision and
    the loss / metric result is float32 and finite."""
    with common.dtype_policy(policy):
        x, y, sw = spec.data()
        y_pred = spec_model(spec)(x)
        assert dtype_of(y_pred) == common.compute_dtype(policy)
        obj = spec.make()
        if is_metric(obj):
            obj.update_state(y, y_pred, sample_weight=sw)
            out = obj.result()
        else:
            out = obj(y, y_pred, sample_weight=sw)
        assert dtype_of(out) == "float32", out.dtype
        assert_finite(to_numpy(out), f"{spec.id} under {policy}")
        reference_pred = to_numpy(y_pred).astype("float32")
        logits = exposed_logits(y_pred)
        if getattr(obj, "from_logits", True) is False and logits is not None:
            # Probabilities with their logits on the tensor (TF, torch): the
            # loss reads the logits, so the reference is the float32 model:
            # the activation of the float32 logits (which carries them too).
            activation = getattr(obj, "loss", obj).activation
            reference_pred = keras.activations.get(activation)(keras.ops.cast(logits, "float32"))
        reference = evaluate(spec.make(), y, reference_pred, sw)
        np.testing.assert_allclose(to_numpy(out), reference, rtol=1e-5, atol=1e-6)


def _batched_edge_cases(spec):
    """The edge cases stacked into as few batches as their dtypes allow, so
    each compiles once."""
    groups = {}
    for y_true, y_pred in spec.edge_cases:
        key = (y_true.dtype.str, y_true.shape[1:], y_pred.shape[1:])
        groups.setdefault(key, []).append((y_true, y_pred))
    return [
        (np.concatenate([t for t, _ in cases]), np.concatenate([p for _, p in cases]))
        for cases in groups.values()
    ]


def check_edge_case(spec, name):
    """Every edge case (`name` is "grid": they run stacked, so that each
    batch compiles once) gives a finite value and (losses) finite
    gradients, eagerly and compiled, with the same numbers."""
    obj = spec.make()
    batched = not (is_metric(obj) or spec.batch_level)
    cases = _batched_edge_cases(spec) if batched else spec.edge_cases
    for y_true, y_pred in cases:
        what = f"{spec.id} at {y_true}, {y_pred}"
        if is_metric(obj):
            assert_finite(evaluate(obj, y_true, y_pred), f"{what}: value")
            continue

        def fn(yp, yt=y_true):
            return obj(yt, yp)

        out, _ = common.finite_vjp(fn, [y_pred], what)
        assert_finite(out, f"{what}: value")


def check_keras_mask(spec):
    """A `Masking` layer masks whole samples: the value is the value over
    the unmasked samples alone (as `keras.losses.Loss` and Keras's metrics
    read the mask of `y_pred`)."""
    if spec.keras_mask:
        pytest.skip(spec.keras_mask)
    x, y, sw = spec.data()
    x[::3] = 0.0  # masked samples
    keep = ~np.all(x == 0, axis=1)
    y_pred = spec_model(spec, masking=True)(x)
    value = evaluate(spec.make(), y, y_pred, sw)
    kept = np.compress(keep, to_numpy(y_pred), axis=spec.pred_batch_axis)
    kept_pred = keras.ops.convert_to_tensor(kept, "float32")
    expected = evaluate(spec.make(), y[keep], kept_pred, None if sw is None else sw[keep])
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    assert_finite(value, spec.id)


# --- what the driver (tests/test_harness.py) runs ---------------------------------

POLICIES = common.MIXED_POLICIES  # a loss reads half-precision predictions


def edge_cases(spec):
    return {"grid": spec.edge_cases}


def mask_checks(spec):
    return (check_keras_mask,)
