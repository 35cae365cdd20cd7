"""`NaNAudit`: stop at the first NaN, keep the evidence, name the trap."""

import os
import weakref

import keras
import numpy as np

from keras_stable.audit.core import audit
from keras_stable.audit.data import AuditInputError
from keras_stable.audit.data import as_arrays
from keras_stable.audit.data import save_batch
from keras_stable.audit.execution import compile_function


class NaNAudit(keras.callbacks.Callback):
    """Stops training at the first non-finite loss or weight and audits it.

    Like `keras.callbacks.TerminateOnNaN`, with the evidence kept: when the
    loss of a step is NaN or inf, or a trainable weight is after the step,
    the callback

    1. puts back the weights from before that step (the last finite ones),
    2. saves the batch to `DIRECTORY/nan_step{N}.npz` and the model to
       `DIRECTORY/nan_step{N}.keras`,
    3. runs `keras_stable.audit.audit` on them and writes the report, with
       the step number and the training mode, to `DIRECTORY/nan_step{N}.txt`,
    4. stops training (`model.stop_training = True`).

    `python -m keras_stable.audit nan_step{N}.keras --data nan_step{N}.npz`
    runs the same audit again later (add `--unsafe` for `Lambda` layers).

    With no data given (`NaNAudit()`, like `TerminateOnNaN()`), the batch
    saved is the one the failing step trained on, whatever the input:
    arrays with `shuffle=True`, a `tf.data.Dataset`, a `PyDataset`, a
    generator. The callback sees it by wrapping, for the duration of
    `fit`, the iterator that the model's `train_function` draws its
    batches from (and, on torch, the batch it is handed): it keeps a
    reference to the last batch drawn, nothing is copied until a step goes
    non-finite. With `steps_per_execution > 1` the batch kept is the last
    one of the failing execution.

    Older form: data to audit given explicitly, either one representative
    batch (`x`, `y`), or the training arrays themselves with `batch_size`,
    from which it slices the batch of the failing step (the batch the step
    saw only with `shuffle=False`).

    Args:
        directory: where the files go (created if needed), default
            `"nan_audit"`.
        x: optional: the inputs of the batch to audit (an array, or a
            list/dict of arrays), or the training inputs when `batch_size`
            is given. Default: the batch the failing step trained on.
        y: its labels (optional): the compiled loss (or `loss`) is then
            audited too.
        loss: the loss to audit, if not the one the model was compiled with.
        batch_size: slice the failing step's batch out of `x`/`y` (see
            above); `None` audits `x`/`y` as given.
        stress: passed to `audit` (the stress probes).
        modes: passed to `audit`; default both `"eager"` and `"compiled"`.
        restore_weights: put back the last finite weights (default `True`),
            so that the model you keep, the saved model and the audit all
            start from the weights the failing step started from.
        save_model: also save the model as `nan_step{N}.keras`.
        verbose: 1 (default) prints the audit's table on a stop; 0 is quiet.
        max_consecutive_skips: with a `keras_stable.optimizers.Guarded`
            optimizer (also inside Keras's `LossScaleOptimizer`), a step it
            skipped (a non-finite loss or gradient; the weights unchanged)
            does not stop training: the first one's batch and audit are
            saved as `skipped_step{N}.npz`/`.txt` (and `.keras`),
            `logs["skipped_steps"]` counts each epoch's, and training stops
            after this many skips in a row (default 10).

    Attributes:
        step: the step (counted from 1 over the whole `fit`) that went
            non-finite, or `None`.
        report: the `AuditReport`, or `None` (no step failed, or the audit
            could not run: then `audit_error` says why, as the report file
            does).
        audit_error: why the audit could not run, or `None`.
        paths: the files written: `{"batch": ..., "report": ..., "model": ...}`.
        skipped_step: the first step a `Guarded` optimizer skipped, or `None`.

    Cost per step: one compiled call (`jax.jit`, a `tf.function`; eager
    on torch) that checks the loss and every trainable weight and copies
    the weights on the device (the model from before the next step;
    `restore_weights=False` drops the copy), one scalar sent to the host,
    and a Python call around the batch iterator; on TensorFlow a step is
    then driven from Python (`steps_per_execution` is honoured) rather
    than inside one graph loop. Measured by `benchmarks/nan_audit.py`
    (docs/benchmarks.md): on a CPU, 1.04-1.10x `TerminateOnNaN()` for a
    small CNN's step, and a fixed ~0.1-0.5 ms more for a tiny
    perceptron's. This is a debugging callback. The
    optimizer's state is not restored.

    Examples:
        >>> import keras, numpy as np, tempfile
        >>> from keras_stable.callbacks import NaNAudit
        >>> x = np.array([[1e3, 0.0], [2e3, 1.0]], "float32")
        >>> inputs = keras.Input((2,))
        >>> probs = keras.layers.Lambda(
        ...     lambda s: keras.ops.exp(s) / keras.ops.sum(keras.ops.exp(s), axis=-1, keepdims=True),
        ...     name="hand_softmax")(inputs)
        >>> model = keras.Model(inputs, keras.layers.Dense(1)(probs))
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> callback = NaNAudit(tempfile.mkdtemp(), x, np.zeros((2, 1), "float32"), modes=["eager"], verbose=0)
        >>> _ = model.fit(x, np.zeros((2, 1), "float32"), callbacks=[callback], verbose=0)
        >>> callback.step, callback.report.findings[0].trap
        (1, 'unshifted_softmax')
    """

    def __init__(
        self,
        directory="nan_audit",
        x=None,
        y=None,
        loss=None,
        batch_size=None,
        stress=False,
        modes=None,
        restore_weights=True,
        save_model=True,
        verbose=1,
        max_consecutive_skips=10,
    ):
        super().__init__()
        if (
            isinstance(max_consecutive_skips, bool)
            or not isinstance(max_consecutive_skips, int)
            or max_consecutive_skips < 1
        ):
            raise ValueError(
                "`max_consecutive_skips` must be an int >= 1, got "
                f"max_consecutive_skips={max_consecutive_skips!r}."
            )
        self.max_consecutive_skips = max_consecutive_skips
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(f"`batch_size` must be None or an int >= 1, got {batch_size!r}.")
        self.directory = os.fspath(directory)
        self.x = as_arrays(x, "x")
        self.y = as_arrays(y, "y")
        self.loss = loss
        self.batch_size = batch_size
        self.stress = stress
        self.modes = modes
        self.restore_weights = restore_weights
        self.save_model = save_model
        self.verbose = verbose
        self.step = None
        self.report = None
        self.audit_error = None
        self.paths = {}
        self._steps = 0
        self._epoch = 0
        self._last_finite = None
        self._drawn = None
        self._train_function = None
        self.skipped_step = None
        self._guarded = None

    # -- the checks, every step ----------------------------------------

    def _checked_weights(self):
        return [v for v in self.model.trainable_weights if keras.backend.is_float_dtype(v.dtype)]

    def _non_finite_weights(self):
        """The paths of the trainable weights holding a NaN or inf (only
        asked once a step has failed: one check per weight)."""
        weights = self._checked
        if not weights:
            return []
        flags = keras.ops.stack([keras.ops.all(keras.ops.isfinite(v.value)) for v in weights])
        flags = np.asarray(keras.ops.convert_to_numpy(flags))
        return [v.path for v, ok in zip(weights, flags) if not ok]

    def _step_check(self, loss):
        """`(finite, copies)` of the step that just ran."""
        _ = self.model  # on JAX, brings the step's state into the variables (once)
        if keras.backend.backend() == "jax":
            # Values as arguments: a jitted closure would freeze them.
            checked = [v.value for v in self._checked]
            weights = [v.value for v in self._weights] if self.restore_weights else []
            ok, copies = _compiled_check(self.restore_weights)(loss, checked, weights)
        else:
            ok, copies = _captured_check(
                self.model, self._checked, self._weights, self.restore_weights
            )(loss)
        return bool(keras.ops.convert_to_numpy(ok)), copies

    def on_train_begin(self, logs=None):
        self._steps = 0
        self.step = None
        self.report = None
        self.audit_error = None
        self.paths = {}
        # The variables do not change during `fit`: listed once.
        self._checked = self._checked_weights()
        self._weights = list(self.model.weights)
        self._last_finite = (
            [keras.ops.copy(v.value) for v in self._weights] if self.restore_weights else None
        )
        self._drawn = None
        if self.x is None:
            self._wrap_train_function()
        self.skipped_step = None
        self._guarded = _guarded_optimizer(self.model)
        optimizer = getattr(self.model, "optimizer", None)
        self._loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self._seen_skips = self._read_skips()
        self._consecutive_skips = 0
        self._epoch_skips = 0

    def _read_skips(self):
        """`(skipped_steps, iterations)` of the `Guarded` optimizer."""
        if self._guarded is None:
            return (0, 0)
        values = (self._guarded.skipped_steps.value, self._guarded.iterations)
        return tuple(int(keras.ops.convert_to_numpy(v)) for v in values)

    def on_train_end(self, logs=None):
        if self._train_function is not None:
            self.model.train_function = self._train_function
            self._train_function = None

    def _wrap_train_function(self):
        model = self.model
        original = model.train_function
        if original is None:
            return
        self._train_function = original
        callback = self

        if keras.backend.backend() == "torch":

            def train_function(data):
                callback._drawn = data[0] if isinstance(data, list) and len(data) == 1 else data
                return original(data)

        else:

            def train_function(*args):
                *head, iterator = args
                return original(*head, _Recording(iterator, callback))

        model.train_function = train_function

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_skips = 0

    def on_epoch_end(self, epoch, logs=None):
        if self._guarded is not None and logs is not None:
            logs["skipped_steps"] = self._epoch_skips

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        loss = (logs or {}).get("loss")
        if loss is not None and not keras.ops.is_tensor(loss):
            loss = keras.ops.convert_to_tensor(loss, "float32")
        if self._guarded is not None:
            # The logged loss is the epoch's running mean: NaN for the rest
            # of the epoch after a skipped step. The weights decide, and a
            # step the optimizer skipped is one where its count grew or
            # (inside Keras's loss scaling, which skips before it) its
            # iterations did not.
            finite, copies = self._step_check(None)
            counts = self._read_skips()
            skipped = counts[0] > self._seen_skips[0] or (
                self._loss_scaled and counts[1] == self._seen_skips[1]
            )
            self._seen_skips = counts
            if skipped and finite:
                self._skipped(batch, loss)
                return
            self._consecutive_skips = 0
        else:
            finite, copies = self._step_check(loss)
        if finite:
            if self.restore_weights:
                self._last_finite = copies
            return
        loss = None if loss is None else float(keras.ops.convert_to_numpy(loss))
        bad_loss = loss is not None and not np.isfinite(loss)
        self._stop(batch, loss if bad_loss else None, self._non_finite_weights())

    # -- what happens at the first NaN -----------------------------------

    def _skipped(self, batch, loss):
        self._epoch_skips += 1
        self._consecutive_skips += 1
        if self.skipped_step is None:
            self.skipped_step = self._steps
            loss = None if loss is None else float(keras.ops.convert_to_numpy(loss))
            self._stop(
                batch,
                loss if loss is not None and not np.isfinite(loss) else None,
                [],
                skipped=True,
            )
        if self._consecutive_skips >= self.max_consecutive_skips:
            self.model.stop_training = True
            self.step = self._steps
            if self.verbose:
                print(
                    f"NaNAudit: {self._consecutive_skips} steps in a row skipped by the "
                    f"optimizer, training stopped at step {self.step}"
                )

    def _batch(self, batch):
        if self.x is None:
            if self._drawn is None:
                return None, None
            x, y, _ = keras.utils.unpack_x_y_sample_weight(self._drawn)
            return as_arrays(x, "x"), as_arrays(y, "y")
        if self.batch_size is None:
            return self.x, self.y
        start, stop = batch * self.batch_size, (batch + 1) * self.batch_size

        def take(a):
            return a[start:stop]

        x = keras.tree.map_structure(take, self.x)
        y = None if self.y is None else keras.tree.map_structure(take, self.y)
        return x, y

    def _stop(self, batch, loss, bad_weights, skipped=False):
        """Stops training and keeps the evidence; with `skipped` (a step
        the optimizer skipped, the weights untouched), only the evidence."""
        model = self.model
        if not skipped:
            model.stop_training = True
            self.step = self._steps
        restored = False
        if self.restore_weights and self._last_finite is not None and not skipped:
            for variable, value in zip(model.weights, self._last_finite):
                variable.assign(value)
            restored = True
        os.makedirs(self.directory, exist_ok=True)
        stem = os.path.join(
            self.directory,
            f"skipped_step{self.skipped_step}" if skipped else f"nan_step{self.step}",
        )
        x, y = self._batch(batch)
        self.paths = {"report": stem + ".txt"}
        notes = []
        if x is not None:
            self.paths["batch"] = stem + ".npz"
            save_batch(self.paths["batch"], x, y)
        else:
            notes.append("the batch of the step could not be seen")
        if self.save_model:
            try:
                model.save(stem + ".keras")
                self.paths["model"] = stem + ".keras"
            except Exception as error:  # noqa: BLE001 - the audit still runs
                # No half-written file is left behind as if it were the model.
                if os.path.exists(stem + ".keras"):
                    os.remove(stem + ".keras")
                notes.append(f"the model could not be saved: {_message(error)}")
        audit_text = "no batch to audit"
        if x is not None:
            try:
                self.report = audit(
                    model, x, y, loss=self.loss, stress=self.stress, modes=self.modes
                )
                audit_text = str(self.report)
            except AuditInputError as error:
                audit_text = f"the audit could not run: {error}"
            except Exception as error:  # noqa: BLE001 - training stops cleanly
                # A model the audit cannot run as `fit` does (a loss computed in
                # a custom `train_step`, say): say so in the report.
                audit_text = (
                    f"the audit could not run on this model: {type(error).__name__}: "
                    f"{_message(error)}. The audit calls the model on the batch "
                    "and applies its compiled loss; a loss computed inside a "
                    "custom `train_step` is not visible to it: audit the "
                    "sub-model and the loss that step uses, "
                    "`keras_stable.audit.audit(submodel, x, y, loss=...)`."
                )
            self.audit_error = None if self.report is not None else audit_text
        step = self.skipped_step if skipped else self.step
        lines = [
            f"NaNAudit: step {step} (epoch {self._epoch + 1}, batch {batch})",
            f"training mode: {self._mode()}",
        ]
        if loss is not None:
            lines.append(f"non-finite loss: {loss}")
        if bad_weights:
            shown = ", ".join(bad_weights[:5]) + (" ..." if len(bad_weights) > 5 else "")
            lines.append(f"non-finite weights after the step: {shown}")
        if skipped:
            lines.append("the optimizer skipped the step: weights and its state unchanged")
        else:
            lines.append(
                "weights: restored to those before the step"
                if restored
                else "weights: left as they are after the step"
            )
        if "batch" in self.paths:
            source = (
                " (the batch the step trained on)"
                if self.x is None
                else ("" if self.batch_size else " (the batch given to NaNAudit)")
            )
            lines.append(f"batch: {self.paths['batch']}{source}")
        lines += [f"note: {note}" for note in notes]
        with open(self.paths["report"], "w") as file:
            file.write("\n".join(lines) + "\n\n" + audit_text + "\n")
        if self.verbose:
            what = "was skipped by the optimizer" if skipped else "went non-finite"
            print(f"NaNAudit: step {step} {what}\n{audit_text}\n(report in {self.paths['report']})")

    def _mode(self):
        model = self.model
        if getattr(model, "run_eagerly", False):
            return "eager (run_eagerly=True)"
        return f"compiled (jit_compile={getattr(model, 'jit_compile', None)})"


def _guarded_optimizer(model):
    """The model's `keras_stable.optimizers.Guarded` (also inside Keras's
    `LossScaleOptimizer`), or `None`."""
    from keras_stable.optimizers import Guarded

    optimizer = getattr(model, "optimizer", None)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    return optimizer if isinstance(optimizer, Guarded) else None


def _check_function(copy):
    def check(loss, checked, weights):
        finite = [keras.ops.all(keras.ops.isfinite(v)) for v in checked]
        if loss is not None:
            finite.append(keras.ops.all(keras.ops.isfinite(loss)))
        ok = keras.ops.all(keras.ops.stack(finite)) if finite else keras.ops.ones((), "bool")
        return ok, ([keras.ops.copy(v) for v in weights] if copy else [])

    return check


_CHECKS = {}


def _compiled_check(copy):
    """The per-step check on JAX (`_captured_check` elsewhere), compiled
    once per `copy`: whether the loss and every weight in `checked` are
    finite (one scalar for the host), and, with `copy`, on-device copies of
    `weights` (the model from before the next step). Compiled once for the
    process, it is traced again only for a model of other shapes."""
    key = (keras.backend.backend(), copy)
    if key not in _CHECKS:
        _CHECKS[key] = compile_function(_check_function(copy))
    return _CHECKS[key]


_CAPTURED = weakref.WeakKeyDictionary()


def _captured_check(model, checked, weights, copy):
    """The per-step check of `_compiled_check` with the variables captured
    instead of passed (TF: a `tf.function` of the loss alone, whose call
    costs a third less than one taking every weight; eager on torch).
    Kept per model, so that each `fit` of the same model reuses it."""
    key = (tuple(map(id, checked)), tuple(map(id, weights)), copy)
    cached = _CAPTURED.get(model)
    if cached is None or cached[0] != key:
        check = _check_function(copy)

        def run(loss):
            return check(
                loss, [v.value for v in checked], [v.value for v in weights] if copy else []
            )

        cached = (key, compile_function(run))
        _CAPTURED[model] = cached
    return cached[1]


def _message(error):
    """An exception's whole message on one line (never cut mid-sentence)."""
    return " ".join(str(error).split()) or type(error).__name__


class _Recording:
    """An iterator over the batches of `iterator` that keeps the last one
    drawn on the callback (a reference, no copy)."""

    def __init__(self, iterator, callback):
        self._iterator = iterator
        self._callback = callback

    def __iter__(self):
        return self

    def __next__(self):
        self._callback._drawn = data = next(self._iterator)
        return data
