"""NaN audit: name the layer and the trap that turned a value or a gradient NaN.

`audit(model, x, y, loss)` runs the model on a batch layer by layer, eagerly
and compiled, differentiates the loss, and reports the first layer whose
value (forward) or gradient went non-finite, with the trap it recognises
and the keras_stable replacement. `python -m keras_stable.audit model.keras
--data batch.npz` does the same from the command line, and
`keras_stable.callbacks.NaNAudit` runs it when training goes NaN.

Modules, one concern each: `tracing` (recording every layer's call),
`execution` (one run, eager or compiled, with gradients, per backend),
`traps` (which call, which trap), `examples` (the guilty rows), `labels`
(labels and indices out of range), `precision` (the half-precision
pre-flight), `probes` (stress probes), `report`
(`Finding`, `AuditReport`), `data` (the batch, the loss, `.npz` files),
`core` (`audit`), `cli` (the command line).
"""

import importlib as _importlib

from keras_stable import _launch

# Where each public name lives: imported here, or on first use while
# `python -m keras_stable.audit` has not chosen the backend yet (it must
# read `--backend` before anything imports Keras; see keras_stable._launch).
_SOURCES = {
    "audit": "core",
    "audit_section": "core",
    "AuditInputError": "data",
    "load_batch": "data",
    "save_batch": "data",
    "AuditReport": "report",
    "Finding": "report",
}


def __getattr__(name):
    if name in _SOURCES:
        module = _importlib.import_module(f"keras_stable.audit.{_SOURCES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'keras_stable.audit' has no attribute {name!r}")


if not _launch.defer_keras():
    from keras_stable.audit.core import audit
    from keras_stable.audit.core import audit_section
    from keras_stable.audit.data import AuditInputError
    from keras_stable.audit.data import load_batch
    from keras_stable.audit.data import save_batch
    from keras_stable.audit.report import AuditReport
    from keras_stable.audit.report import Finding

__all__ = [
    "AuditInputError",
    "AuditReport",
    "Finding",
    "audit",
    "audit_section",
    "load_batch",
    "save_batch",
]
