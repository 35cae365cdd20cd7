"""Losses and metrics declare their arguments once (`args`, `loss_args`):
the constructor's signature, its checks and `get_config` come from it."""

import inspect

import pytest

from keras_stable import losses
from keras_stable import metrics
from keras_stable.common.arguments import snake_case

# Drop-ins whose Keras counterpart puts an argument after `reduction` and
# `name` (`keras.losses.Dice(reduction, name, axis, dtype)`, and `CTC`,
# `Tversky`): their `__init__` is written out in Keras's positional order.
KERAS_ORDER = {
    losses.StableCTC: ["zero_infinity", "reduction", "name", "dtype"],
    losses.StableDice: ["reduction", "name", "axis", "dtype"],
    losses.StableTversky: ["alpha", "beta", "reduction", "name", "axis", "dtype"],
}
LOSSES = [
    getattr(losses, name) for name in losses.__all__ if getattr(losses, name) not in KERAS_ORDER
]
DECLARED_METRICS = [
    getattr(metrics, name)
    for name in metrics.__all__
    if getattr(getattr(metrics, name), "loss_class", None) is not None
]


def _parameters(cls):
    return [(p.name, p.default) for p in inspect.signature(cls).parameters.values()]


@pytest.mark.parametrize("cls", LOSSES, ids=[c.__name__ for c in LOSSES])
def test_a_loss_signature_and_config_come_from_its_declaration(cls):
    own = [(arg.name, arg.default) for arg in cls.args]
    keras_args = [
        ("reduction", "sum_over_batch_size"),
        ("name", snake_case(cls.__name__)),
        ("dtype", None),
    ]
    assert _parameters(cls) == own + keras_args
    config = cls().get_config()
    assert list(config) == ["name", "reduction", "dtype"] + [name for name, _ in own]
    # Positional calls bind as the signature says.
    positional = cls(*[default for _, default in own], "sum", "positional")
    assert positional.reduction == "sum" and positional.name == "positional"
    with pytest.raises(TypeError, match="unexpected"):
        cls(not_an_argument=1)


@pytest.mark.parametrize("cls", list(KERAS_ORDER), ids=[c.__name__ for c in KERAS_ORDER])
def test_a_written_out_loss_keeps_keras_positional_order(cls):
    assert [name for name, _ in _parameters(cls)] == KERAS_ORDER[cls]
    config = cls().get_config()
    assert set(KERAS_ORDER[cls]) <= set(config)
    assert cls.from_config(config).get_config() == config


@pytest.mark.parametrize("cls", DECLARED_METRICS, ids=[c.__name__ for c in DECLARED_METRICS])
def test_a_metric_takes_its_arguments_from_its_loss(cls):
    own = [(name, cls.loss_class.arg(name).default) for name in cls.loss_args]
    assert _parameters(cls) == own + [("name", snake_case(cls.__name__)), ("dtype", None)]
    config = cls().get_config()
    assert {name: config[name] for name, _ in own} == dict(own)


def test_signatures_are_the_documented_ones():
    # The public contract, written out: names, order and defaults.
    assert str(inspect.signature(losses.StableSoftmaxFocalCrossEntropy)) == (
        "(from_logits=True, gamma=2.0, alpha=None, label_smoothing=0.0, axis=-1, "
        "reduction='sum_over_batch_size', name='stable_softmax_focal_cross_entropy', "
        "dtype=None)"
    )
    assert str(inspect.signature(losses.InfoNCELoss)) == (
        "(temperature=0.1, reduction='sum_over_batch_size', name='info_nce_loss', dtype=None)"
    )
    assert str(inspect.signature(metrics.StableBinaryCrossEntropy)) == (
        "(from_logits=True, label_smoothing=0.0, axis=-1, "
        "name='stable_binary_cross_entropy', dtype=None)"
    )


def test_each_argument_is_checked_at_construction():
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.StableSoftmaxCrossEntropy(label_smoothing=1.5)
    with pytest.raises(ValueError, match="soft"):
        losses.TripletHardLoss(soft="yes")
    with pytest.raises(ValueError, match="delta"):
        metrics.MaskedHuber(delta=-1.0)
    with pytest.raises(ValueError, match="task_mask"):
        losses.MaskedMultiTaskDistance(task_weights=[1.0, 2.0], task_mask=[True])
    # Checked values are stored normalised (plain JSON in the config).
    assert losses.StableSoftmaxFocalCrossEntropy(alpha=(0.5, 1)).alpha == [0.5, 1.0]
