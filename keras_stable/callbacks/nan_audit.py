"""`NaNAudit`: stop at the first NaN, keep the evidence, name the trap."""

import os

import keras
import numpy as np

from keras_stable.audit.core import audit
from keras_stable.audit.data import AuditInputError
from keras_stable.audit.data import as_arrays
from keras_stable.audit.data import save_batch


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

    Keras 3 callbacks do not see the batch a step trained on, so the
    callback takes the data to audit: either one representative batch
    (`x`, `y`), or the training arrays themselves with `batch_size`, from
    which it slices the batch of the failing step; that slice is the batch
    the step saw only when `fit` runs with `shuffle=False` on the same
    arrays and `batch_size`.

    Args:
        directory: where the files go (created if needed).
        x: the inputs of the batch to audit (an array, or a list/dict of
            arrays), or the training inputs when `batch_size` is given.
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
        verbose: 1 (default) prints one line when training stops; 0 is quiet.

    Attributes:
        step: the step (counted from 1 over the whole `fit`) that went
            non-finite, or `None`.
        report: the `AuditReport`, or `None`.
        paths: the files written: `{"batch": ..., "report": ..., "model": ...}`.

    Checking the weights costs one device-to-host transfer per step, and
    keeping the last finite weights one on-device copy of them: this is a
    debugging callback. The optimizer's state is not restored.

    Example:

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
        directory,
        x,
        y=None,
        loss=None,
        batch_size=None,
        stress=False,
        modes=None,
        restore_weights=True,
        save_model=True,
        verbose=1,
    ):
        super().__init__()
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
        self.paths = {}
        self._steps = 0
        self._epoch = 0
        self._last_finite = None

    # -- the checks, every step ----------------------------------------

    def _copy_weights(self):
        return [keras.ops.copy(v.value) for v in self.model.weights]

    def _non_finite_weights(self):
        weights = [v for v in self.model.trainable_weights if keras.backend.is_float_dtype(v.dtype)]
        if not weights:
            return []
        flags = keras.ops.stack([keras.ops.all(keras.ops.isfinite(v.value)) for v in weights])
        flags = np.asarray(keras.ops.convert_to_numpy(flags))
        return [v.path for v, ok in zip(weights, flags) if not ok]

    def on_train_begin(self, logs=None):
        self._steps = 0
        self.step = None
        self.report = None
        self.paths = {}
        self._last_finite = self._copy_weights() if self.restore_weights else None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        loss = (logs or {}).get("loss")
        loss = None if loss is None else float(np.asarray(keras.ops.convert_to_numpy(loss)))
        bad_loss = loss is not None and not np.isfinite(loss)
        bad_weights = self._non_finite_weights()
        if bad_loss or bad_weights:
            self._stop(batch, loss if bad_loss else None, bad_weights)
        elif self.restore_weights:
            self._last_finite = self._copy_weights()

    # -- what happens at the first NaN -----------------------------------

    def _batch(self, batch):
        if self.batch_size is None:
            return self.x, self.y
        start, stop = batch * self.batch_size, (batch + 1) * self.batch_size

        def take(a):
            return a[start:stop]

        x = keras.tree.map_structure(take, self.x)
        y = None if self.y is None else keras.tree.map_structure(take, self.y)
        return x, y

    def _stop(self, batch, loss, bad_weights):
        model = self.model
        model.stop_training = True
        self.step = self._steps
        restored = False
        if self.restore_weights and self._last_finite is not None:
            for variable, value in zip(model.weights, self._last_finite):
                variable.assign(value)
            restored = True
        os.makedirs(self.directory, exist_ok=True)
        stem = os.path.join(self.directory, f"nan_step{self.step}")
        x, y = self._batch(batch)
        self.paths = {"batch": stem + ".npz", "report": stem + ".txt"}
        save_batch(self.paths["batch"], x, y)
        notes = []
        if self.save_model:
            try:
                model.save(stem + ".keras")
                self.paths["model"] = stem + ".keras"
            except Exception as error:  # noqa: BLE001 - the audit still runs
                notes.append(f"the model could not be saved: {str(error).strip().splitlines()[0]}")
        try:
            self.report = audit(model, x, y, loss=self.loss, stress=self.stress, modes=self.modes)
            audit_text = str(self.report)
        except AuditInputError as error:
            audit_text = f"the audit could not run: {error}"
        lines = [
            f"NaNAudit: step {self.step} (epoch {self._epoch + 1}, batch {batch})",
            f"training mode: {self._mode()}",
        ]
        if loss is not None:
            lines.append(f"non-finite loss: {loss}")
        if bad_weights:
            shown = ", ".join(bad_weights[:5]) + (" ..." if len(bad_weights) > 5 else "")
            lines.append(f"non-finite weights after the step: {shown}")
        lines.append(
            "weights: restored to those before the step"
            if restored
            else "weights: left as they are after the step"
        )
        lines.append(
            f"batch: {self.paths['batch']}"
            + ("" if self.batch_size else " (the batch given to NaNAudit)")
        )
        lines += [f"note: {note}" for note in notes]
        with open(self.paths["report"], "w") as file:
            file.write("\n".join(lines) + "\n\n" + audit_text + "\n")
        if self.verbose:
            print(f"NaNAudit: step {self.step} went non-finite; report in {self.paths['report']}")

    def _mode(self):
        model = self.model
        if getattr(model, "run_eagerly", False):
            return "eager (run_eagerly=True)"
        return f"compiled (jit_compile={getattr(model, 'jit_compile', None)})"
