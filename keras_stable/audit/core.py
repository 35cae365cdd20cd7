"""`audit()`: run the model layer by layer, eagerly and compiled, and say
which layer, which stage and which trap turned a value or a gradient NaN."""

import dataclasses

import keras

from keras_stable.audit import execution
from keras_stable.audit import probes as probes_lib
from keras_stable.audit.data import AuditInputError
from keras_stable.audit.data import _first_line
from keras_stable.audit.data import check_batch
from keras_stable.audit.data import resolve_loss
from keras_stable.audit.data import to_tensors
from keras_stable.audit.examples import RowRuns
from keras_stable.audit.labels import find_labels
from keras_stable.audit.padding import padding_warnings
from keras_stable.audit.precision import check_precision
from keras_stable.audit.precision import preflight
from keras_stable.audit.report import MODES
from keras_stable.audit.report import AuditReport
from keras_stable.audit.tracing import collect_nodes
from keras_stable.audit.tracing import instrument
from keras_stable.audit.traps import find


def _check_modes(modes):
    if modes is None:
        return list(MODES)
    modes = [modes] if isinstance(modes, str) else list(modes)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"`modes` must be a non-empty subset of {list(MODES)}, got {modes!r}.")
    return modes


def _run(report, model, x, y, loss_fn, modes, probe, precision=None):
    """Audits one (model, batch) pair in each mode; appends to `report`.

    Returns the modes that ran (a mode that fails is a note).
    """
    xt, yt = to_tensors(x), to_tensors(y)
    if not model.built:
        # Built outside the recording: building calls layers symbolically.
        try:
            model(xt, training=False)
        except Exception as error:  # noqa: BLE001 - any failure is a bad input
            raise AuditInputError(
                f"the model cannot be called on x: {_first_line(error)}"
            ) from error
    with instrument(collect_nodes(model)):
        try:
            plan = execution.plan_deltas(model, loss_fn, xt, yt)
        except execution.LossError as error:
            cause = error.__cause__ or error
            raise AuditInputError(
                f"the loss cannot be computed on (y, model(x)): {_first_line(cause)}"
            ) from cause
        except Exception as error:  # noqa: BLE001 - any failure is a bad input
            raise AuditInputError(
                f"the model cannot be called on x: {_first_line(error)}"
            ) from error
        ran = []
        rows = RowRuns(model, x, y, loss_fn)
        for mode in modes:
            if mode == "compiled" and not execution.compiled_mode_available():
                continue
            try:
                run = execution.differentiate(model, loss_fn, xt, yt, plan, mode)
            except Exception as error:  # noqa: BLE001 - reported, not raised
                where = f" under probe {probe}" if probe else ""
                report.notes.append(f"the {mode} run{where} failed: {_first_line(error)}")
                continue
            if precision and not ran:
                report.headroom, half, notes = preflight(run, precision)
                report.findings.extend(half)
                report.notes.extend(notes)
            ran.append(mode)
            finding = find(run, probe, execution.rerun_in_float32)
            if finding is not None and finding.trap == "unknown":
                # The inf of infeasible CTC labels, at the loss or at the
                # layer that computes it: already named.
                named = {f.layer for f in report.findings if f.trap == "ctc_infeasible"}
                if finding.layer in named or (finding.layer == "loss" and named):
                    finding = None
            if finding is not None:
                finding = dataclasses.replace(finding, examples=rows.guilty(finding))
                report.findings.append(finding)
        if rows.note and rows.note not in report.notes:
            report.notes.append(rows.note)
    return ran


def audit(model, x, y=None, loss=None, stress=False, *, modes=None, precision=None):
    """Finds the layer and the trap that turn a value or a gradient NaN.

    Runs `model` on the batch `x` with every layer recorded, once eagerly and
    once compiled (`tf.function(jit_compile=True)` on TensorFlow, `jax.jit`
    on JAX; PyTorch runs eagerly only), and differentiates the loss. Two
    stages are checked:

    - **forward**: the first layer whose output holds NaN (or inf) while
      its inputs do not;
    - **gradient**: walking back from the loss, the first layer where the
      gradient reaching its input is non-finite while the gradient reaching
      its output is finite (only when every value is finite).

    The trap is then named from the numbers around that layer (an all-zero
    vector going into a norm, inputs above 88 going into `exp`, a row of
    `-inf`, NaN labels next to a 0 mask, a float16 layer that is finite in
    float32), or `"unknown"`.

    Args:
        model: a `keras.Model`: functional, Sequential or subclassed; nested
            models are audited layer by layer.
        x: the batch: an array, or a list/dict of arrays for several inputs.
        y: the labels of the batch (optional).
        loss: the loss of `(y, y_pred)`: a `keras.losses.Loss`, a function
            or a name; a list/dict for several outputs. Default: the loss
            the model was compiled with. Without `y`, the gradient is that
            of the sum of the model's (finite) outputs.
        stress: `True` to run the stress probes too (zero inputs,
            coincident examples, inputs x1e3, every mask off, the model
            under `mixed_float16` and `mixed_bfloat16`), or a list of probe
            names (`keras_stable.audit.probes.PROBES`).
        modes: the modes to run, `("eager", "compiled")` by default.
        precision: `"mixed_float16"` or `"mixed_bfloat16"` for a
            pre-flight of that policy from the float32 run (the model's
            policy and weights are left as they are): `half_overflow` for a
            layer whose output exceeds the dtype's max (stage forward), or
            whose output gradient does at a loss scale of 1 (stage
            gradient); `half_underflow` for a layer output that is nonzero
            with every nonzero entry below the smallest normal;
            `report.headroom` maps every layer to max |output| / dtype max.
            A gradient past the range only times the initial loss scale
            2**15 (float16) is a note (the steps dynamic loss scaling
            skips), not a finding.

    Returns:
        An `AuditReport`: `report.ok`, `report.findings`, `str(report)`.

    Raises:
        AuditInputError: (a `ValueError`) the model cannot be called on
            `x`, `x` and `y` disagree, or the loss cannot be computed.

    The model is called with `training=False`, so no weight or statistic
    changes. Nothing is installed outside the call: each layer's `call` is
    wrapped for the duration of the audit and restored afterwards.

    Examples:
        >>> import keras, numpy as np
        >>> from keras_stable.audit import audit
        >>> inputs = keras.Input((3,))
        >>> norm = keras.layers.Lambda(lambda t: keras.ops.sqrt(keras.ops.sum(t**2, axis=-1)), name="norm")
        >>> model = keras.Model(inputs, norm(inputs))
        >>> report = audit(model, np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]], "float32"), modes=["eager"])
        >>> report.ok
        False
        >>> f = report.findings[0]
        >>> f.layer, f.stage, f.trap
        ('norm', 'gradient', 'norm_at_zero')
    """
    # Every variable of the model as it was (the weights, and the state of
    # its seed generators, which a traced dropout could leave holding a
    # JAX tracer): put back whatever the runs did, so that a `fit` after
    # the audit is the `fit` without it.
    state = [(v, keras.ops.convert_to_numpy(v)) for v in model.variables]
    try:
        with execution.random_state_kept():
            return _audit(model, x, y, loss, stress, modes, precision)
    finally:
        for variable, value in state:
            variable.assign(value)


def _audit(model, x, y, loss, stress, modes, precision):
    x, y = check_batch(model, x, y)
    loss_fn = resolve_loss(model, loss, y)
    modes = _check_modes(modes)
    precision = check_precision(precision)
    probe_names = probes_lib.check_probes(stress)
    report = AuditReport(backend=keras.backend.backend())
    if "compiled" in modes and not execution.compiled_mode_available():
        report.notes.append(f"compiled mode is not audited on {report.backend}: eager only")
    given_loss = loss if loss is not None else getattr(model, "loss", None)
    if model.built:
        report.findings.extend(find_labels(model, x, y, given_loss))
        report.warnings.extend(padding_warnings(model, x))
    try:
        report.modes = _run(report, model, x, y, loss_fn, modes, None, precision)
    except AuditInputError as error:
        if not report.findings:
            raise
        # The labels the loss cannot take stop it on some backends.
        report.notes.append(f"the model and the loss could not run on this batch: {error}")
        return report
    if not report.modes:
        if report.findings:
            return report
        raise AuditInputError(f"the audit could not run the model: {'; '.join(report.notes)}")
    if precision is not None and precision not in probe_names:
        # The pre-flight reads layer outputs of the float32 run; what
        # overflows inside a layer's own `call` shows only when the model
        # runs under the policy: its probe runs too.
        probe_names = [precision, *probe_names]
    for name in probe_names:
        try:
            probe_model, probe_x, probe_y = probes_lib.apply(name, model, x, y)
        except probes_lib.ProbeNotApplicable as reason:
            report.notes.append(f"probe {name} skipped: {reason}")
            continue
        report.probes.append(name)
        try:
            _run(report, probe_model, probe_x, probe_y, loss_fn, modes, name)
        except AuditInputError as error:
            report.notes.append(f"probe {name} could not run: {error}")
    # The pre-flight and its probe can name the same layer: once.
    seen = set()
    report.findings = [
        f
        for f in report.findings
        if (key := (f.layer, f.stage, f.trap, f.mode, f.probe)) not in seen and not seen.add(key)
    ]
    return report


def audit_section(cases, stress=False, modes=None):
    """The audit of several (model, batch, loss) cases, as one text block.

    For the demo: after it trains the plain formulations of the bug
    reports, it can show which layer and which trap each one hits.

    Args:
        cases: iterable of `(title, model, x, y, loss)`.
        stress: passed to `audit`.
        modes: passed to `audit`.

    Returns:
        A string: for each case, its title and `str(audit(...))`.
    """
    blocks = []
    for title, model, x, y, loss in cases:
        report = audit(model, x, y, loss=loss, stress=stress, modes=modes)
        blocks.append(f"{title}\n{'=' * len(title)}\n{report}")
    return "\n\n".join(blocks)
