"""`Guarded`: an optimizer step that never turns a model NaN."""

import keras
from keras import ops

from keras_stable.common import keras_internals
from keras_stable.common.checks import check_positive
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.serialization import register
from keras_stable.optimizers import _clipping

_HALF = ("float16", "bfloat16")
_CLIP_ARGS = ("clipnorm", "global_clipnorm", "clipvalue")


def _check_optimizer(optimizer):
    if isinstance(optimizer, (str, dict)):
        try:
            optimizer = keras.optimizers.get(optimizer)
        except ValueError as error:
            raise ValueError(
                f"`optimizer` must be a Keras optimizer or the identifier of one "
                f"(such as 'adam'), got {optimizer!r}: {error}"
            ) from None
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(
            "`optimizer` must be a `keras.optimizers.Optimizer` instance or the "
            f"identifier of one (such as 'adam'), got {optimizer!r} of type "
            f"{type(optimizer).__name__}."
        )
    return optimizer


def _check_clipping(optimizer, clip):
    """The clipping `Guarded` applies: its own arguments, or the inner
    optimizer's, which it takes over (Keras's own overflows)."""
    for name in _CLIP_ARGS:
        if clip[name] is not None:
            clip[name] = check_positive(clip[name], name)
    if clip["clipnorm"] is not None and clip["global_clipnorm"] is not None:
        raise ValueError(
            "`clipnorm` and `global_clipnorm` cannot both be set: got "
            f"clipnorm={clip['clipnorm']} and global_clipnorm={clip['global_clipnorm']}. "
            "Choose one (`global_clipnorm` scales every gradient by one factor)."
        )
    if clip["clipvalue"] is not None and any(clip[n] is not None for n in _CLIP_ARGS[:2]):
        raise ValueError(
            "`clipvalue` cannot be combined with `clipnorm` or `global_clipnorm` "
            f"(as in Keras): got {clip}."
        )
    inner = {name: getattr(optimizer, name, None) for name in _CLIP_ARGS}
    inner = {name: value for name, value in inner.items() if value}
    if inner:
        mine = {name: value for name, value in clip.items() if value is not None}
        if mine:
            raise ValueError(
                f"The optimizer already clips its gradients ({inner}) and `Guarded` "
                f"was given {mine} too: set the clipping on `Guarded` only."
            )
        clip.update(inner)
        for name in inner:
            setattr(optimizer, name, None)
    return clip


@register
class Guarded(keras.optimizers.Optimizer):
    """Wraps a Keras optimizer so that a non-finite step changes nothing.

    A step whose loss or any gradient entry is NaN or infinite is skipped
    atomically: the model's variables and every variable of the wrapped
    optimizer (its slots, `iterations`, the EMA) are left bit-identical, and
    the non-trainable counter `skipped_steps` grows by 1. A finite step is
    the wrapped optimizer's own step, bit for bit (with the same clipping,
    wherever Keras's clipping is finite). Use it wherever a Keras optimizer
    goes: `compile`/`fit`, custom loops calling `apply` or
    `apply_gradients`, JAX's `stateless_apply`, `.keras` files.

    Args:
        optimizer: a `keras.optimizers.Optimizer` instance, or an identifier
            such as `"adam"`. If it clips its gradients itself (`clipnorm`,
            `global_clipnorm` or `clipvalue`), `Guarded` takes that
            clipping over and computes it safely.
        clipnorm: a positive float: each gradient is scaled to a Euclidean
            norm of at most `clipnorm` (Keras's `clipnorm`).
        global_clipnorm: a positive float: all gradients are scaled by one
            factor to a joint norm of at most `global_clipnorm` (Keras's
            `global_clipnorm`). Not together with `clipnorm`.
        clipvalue: a positive float: each entry is clipped into
            `[-clipvalue, clipvalue]`. Not together with a norm clip.
        master_weights: `None`, or `"float32"`: float16 and bfloat16 model
            variables are updated through float32 copies held by this
            optimizer (the wrapped optimizer's slots are float32 too), and
            the model variable is the copy rounded to its dtype.

    Numerical stability:
        The skip decision is one fused flag over every gradient (and the
        loss, through `scale_loss`), computed on the device: no host
        synchronisation. On TensorFlow the step runs under `tf.cond`; on
        JAX and PyTorch every variable the step may change is selected
        between its new and its old value, which XLA fuses into the update.
        Keras's clipping squares the gradients in their own dtype, so a
        finite gradient of 1e20 in float32 (or 300 on float16 variables)
        overflows the sum of squares: `global_clipnorm` then turns every
        weight NaN and `clipnorm` applies a zero step. Here the sum of
        squares is computed in float32 and, where it overflowed, again on
        the gradients times `2**-90` (exact): any finite gradient is
        clipped to the float64 result within an ulp or so, never NaN and
        never a zero step. Without master weights, an update smaller than
        half an ulp of a bfloat16 weight rounds away (Keras's optimizers
        leave bf16 weights unchanged at lr 1e-4); the float32 copies keep
        it.

    Examples:
        >>> import keras, numpy as np
        >>> from keras_stable.optimizers import Guarded
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer=Guarded("adam", global_clipnorm=1.0), loss="mse")
        >>> x = np.ones((4, 2), "float32"); y = np.ones((4, 1), "float32")
        >>> before = model.get_weights()
        >>> y_bad = y.copy(); y_bad[0] = np.nan
        >>> _ = model.train_on_batch(x, y_bad)
        >>> all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
        True
        >>> int(model.optimizer.skipped_steps.numpy()), int(model.optimizer.iterations.numpy())
        (1, 0)
    """

    def __init__(
        self,
        optimizer,
        *,
        clipnorm=None,
        global_clipnorm=None,
        clipvalue=None,
        master_weights=None,
        name=None,
    ):
        optimizer = _check_optimizer(optimizer)
        clip = _check_clipping(
            optimizer,
            {"clipnorm": clipnorm, "global_clipnorm": global_clipnorm, "clipvalue": clipvalue},
        )
        if master_weights not in (None, "float32"):
            raise ValueError(
                f"`master_weights` must be None or 'float32', got master_weights={master_weights!r}."
            )
        # The wrapped optimizer's loss scale is applied here, before the
        # clipping, as Keras's own `apply` does; it must not apply twice.
        loss_scale_factor = optimizer.loss_scale_factor
        optimizer.loss_scale_factor = None
        # Keras's base class keeps `clipnorm` & co. as attributes; its own
        # clipping (in the `apply` overridden here) never runs.
        super().__init__(learning_rate=0.0, name=name, loss_scale_factor=loss_scale_factor, **clip)
        self.inner_optimizer = optimizer
        self.master_weights = master_weights
        self.skipped_steps = self.add_variable(
            shape=(), dtype="int32", initializer="zeros", name="skipped_steps"
        )

    # -- construction -----------------------------------------------------

    def build(self, var_list):
        var_list = list(var_list)
        masters = []
        for variable in var_list:
            if self.master_weights and dtype_of(variable) in _HALF:
                masters.append(self._add_master(variable))
            else:
                masters.append(None)
        self._masters = masters
        inner_vars = [m if m is not None else v for m, v in zip(masters, var_list)]
        self.inner_optimizer.build(inner_vars)
        super().build(var_list)

    def _add_master(self, variable):
        def initializer(shape, dtype=None):
            return ops.cast(variable.value, "float32")

        name = getattr(variable, "path", variable.name).replace("/", "_")
        return self.add_variable(
            shape=variable.shape,
            dtype="float32",
            initializer=initializer,
            name=f"{name}_master",
        )

    @property
    def variables(self):
        return keras_internals.optimizer_own_variables(self) + self.inner_optimizer.variables

    @property
    def learning_rate(self):
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def iterations(self):
        return self.inner_optimizer.iterations

    # -- the step ---------------------------------------------------------

    def scale_loss(self, loss):
        """The wrapped optimizer's loss scaling; a non-finite loss makes
        every gradient NaN (so the step is skipped) and changes nothing
        else: `loss + (t - stop_gradient(t))` with `t = 0 * loss` has the
        loss's value and a derivative of exactly 1 where the loss is
        finite, and NaN where it is not."""
        loss = super().scale_loss(loss)
        finite = ops.isfinite(loss)
        t = ops.where(finite, ops.zeros_like(loss), ops.full_like(loss, float("nan"))) * loss
        return loss + (t - ops.stop_gradient(t))

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if not grads:
            return
        if trainable_variables is None:
            if not self.built:
                raise ValueError(
                    "When passing `grads` without `trainable_variables`, the optimizer "
                    "must already be built: call `optimizer.build(trainable_variables)`."
                )
            trainable_variables = keras_internals.optimizer_trainable_variables(self)
        else:
            trainable_variables = list(trainable_variables)
            if not self.built:
                with keras.name_scope(self.name, caller=self):
                    self.build(trainable_variables)
                self.built = True
            keras_internals.check_optimizer_knows(self, trainable_variables)
        if len(grads) != len(trainable_variables):
            raise ValueError(
                f"`grads` ({len(grads)}) and `trainable_variables` "
                f"({len(trainable_variables)}) must have the same length."
            )
        # TF gives an `Embedding` an `IndexedSlices` gradient: dense here,
        # as Keras's Adam and SGD make it in their arithmetic anyway.
        # (TF's own conversion: the unsorted segment sum of the slices.)
        grads = [
            ops.segment_sum(g.values, g.indices, num_segments=v.shape[0])
            if hasattr(g, "dense_shape")
            else g
            for g, v in zip(grads, trainable_variables)
        ]
        present = [(g, v) for g, v in zip(grads, trainable_variables) if g is not None]
        if not present:
            raise ValueError("No gradients provided for any variable.")
        finite = self._all_finite([g for g, _ in present])
        if keras.backend.backend() == "tensorflow":
            self._tf_apply(finite, grads, trainable_variables)
        else:
            self._select_apply(finite, grads, trainable_variables)

    def apply_gradients(self, grads_and_vars):
        grads, trainable_variables = zip(*grads_and_vars)
        self.apply(grads, trainable_variables)
        # The wrapped optimizer's count (Keras's returns its own).
        return self.iterations

    @staticmethod
    def _all_finite(grads):
        # One reduction per gradient, one flag: no value leaves the device.
        return ops.all(ops.stack([ops.all(ops.isfinite(g)) for g in grads]))

    def _count(self, finite):
        self.skipped_steps.assign(self.skipped_steps + ops.cast(ops.logical_not(finite), "int32"))

    def _tf_apply(self, finite, grads, trainable_variables):
        # `tf.cond`: the step's variable updates run only on a finite step,
        # so nothing needs restoring; no host round trip in a graph or XLA.
        ops.cond(finite, lambda: self._step(grads, trainable_variables), lambda: None)
        self._count(finite)

    def _select_apply(self, finite, grads, trainable_variables):
        # JAX and PyTorch: the step always runs and every variable it may
        # change is then set to `where(finite, new, old)` (fused by XLA into
        # the update; a `cond` would synchronise with the host on PyTorch).
        state = self._step_state(trainable_variables)
        old = [ops.copy(ops.stop_gradient(v.value)) for v in state]
        self._step(grads, trainable_variables)
        for v, before in zip(state, old):
            v.assign(ops.where(finite, v.value, before))
        self._count(finite)

    def _step_state(self, trainable_variables):
        masters = [
            self._masters[keras_internals.optimizer_variable_index(self, v)]
            for v in trainable_variables
        ]
        return (
            list(trainable_variables)
            + [m for m in masters if m is not None]
            + list(self.inner_optimizer.variables)
        )

    def _step(self, grads, trainable_variables):
        """The inner optimizer's step on the unscaled, clipped gradients,
        through the float32 copies of the half-precision variables."""
        pairs = [(g, v) for g, v in zip(grads, trainable_variables) if g is not None]
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        if self.loss_scale_factor is not None:
            grads = [g / self.loss_scale_factor for g in grads]
        grads = self._clip(grads)
        masters = [
            self._masters[keras_internals.optimizer_variable_index(self, v)] for v in variables
        ]
        inner_vars = []
        for g_index, (master, variable) in enumerate(zip(masters, variables)):
            if master is None:
                inner_vars.append(variable)
                continue
            # The copy follows the model variable where something else set
            # it (`set_weights`, a restored checkpoint): where the rounded
            # copy no longer equals it, the copy restarts from it.
            current = ops.cast(variable.value, "float32")
            in_sync = ops.equal(ops.cast(master.value, dtype_of(variable)), variable.value)
            master.assign(ops.where(in_sync, master.value, current))
            grads[g_index] = ops.cast(grads[g_index], "float32")
            inner_vars.append(master)
        self.inner_optimizer.apply(grads, inner_vars)
        for master, variable in zip(masters, variables):
            if master is not None:
                # The copy has no constraint of its own: it takes the
                # model variable's.
                if variable.constraint is not None:
                    master.assign(variable.constraint(master.value))
                variable.assign(ops.cast(master.value, dtype_of(variable)))

    def _clip(self, grads):
        if not (self.clipnorm or self.global_clipnorm or self.clipvalue):
            return grads
        dtypes = [dtype_of(g) for g in grads]
        grads32 = [_clipping.to_float32(g) for g in grads]
        if self.clipnorm:
            clipped = _clipping.clip_by_norm(grads32, self.clipnorm)
        elif self.global_clipnorm:
            clipped = _clipping.clip_by_global_norm(grads32, self.global_clipnorm)
        else:
            clipped = _clipping.clip_by_value(grads32, self.clipvalue)
        if self.master_weights:
            # Rounding to half precision here would lose what the float32
            # copies are there to keep.
            return clipped
        return [ops.cast(c, d) for c, d in zip(clipped, dtypes)]

    def finalize_variable_values(self, var_list):
        var_list = list(var_list)
        if not self.built or not self.inner_optimizer.use_ema:
            return
        masters = [
            self._masters[keras_internals.optimizer_variable_index(self, v)] for v in var_list
        ]
        inner_vars = [m if m is not None else v for m, v in zip(masters, var_list)]
        self.inner_optimizer.finalize_variable_values(inner_vars)
        for master, variable in zip(masters, var_list):
            if master is not None:
                variable.assign(ops.cast(master.value, dtype_of(variable)))

    # -- serialization ----------------------------------------------------

    def get_config(self):
        inner = keras.saving.serialize_keras_object(self.inner_optimizer)
        # The loss scale was taken over at construction: give it back to
        # the wrapped optimizer's config, where `from_config` takes it again.
        inner["config"]["loss_scale_factor"] = self.loss_scale_factor
        return {
            "name": self.name,
            "optimizer": inner,
            "clipnorm": self.clipnorm,
            "global_clipnorm": self.global_clipnorm,
            "clipvalue": self.clipvalue,
            "master_weights": self.master_weights,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        optimizer = keras.saving.deserialize_keras_object(
            config.pop("optimizer"), custom_objects=custom_objects
        )
        return cls(optimizer, **config)
