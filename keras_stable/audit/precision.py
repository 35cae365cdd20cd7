"""The half-precision pre-flight: which layers would leave the range of
float16 (or bfloat16), from one float32 run.

`audit(..., precision="mixed_float16")` keeps the model as it is (policy
and weights) and reads the recorded float32 run: a layer whose output
exceeds the dtype's max, or whose output gradient does at a loss scale of
1, is `half_overflow`; a layer output that is nonzero but whose every
nonzero entry is below the smallest normal is `half_underflow`; `headroom`
maps every layer to max |output| / dtype max.

A gradient that fits float16 but not times the initial loss scale (2**15,
`LossScaleOptimizer`'s) is no finding: the dynamic loss scale halves on
each such step until it fits, a few skipped steps at the start of
training that a float32 layer would not avoid (its neighbours' gradients
are scaled too). The report says how many, in a note.
"""

import numpy as np

from keras_stable.audit.report import Finding
from keras_stable.audit.report import fix_for

PRECISIONS = {
    # dtype, largest finite, smallest normal, the loss scale applied to gradients
    "mixed_float16": ("float16", 65504.0, 2.0**-14, 2.0**15),
    "mixed_bfloat16": ("bfloat16", 3.3895313892515355e38, 2.0**-126, 1.0),
}


def check_precision(precision):
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(
            f"`precision` must be None, 'mixed_float16' or 'mixed_bfloat16', got {precision!r}."
        )
    return precision


def _floats(arrays):
    return [
        np.abs(a[np.isfinite(a)])
        for a in arrays
        if np.issubdtype(np.asarray(a).dtype, np.floating) and np.size(a)
    ]


def _max(arrays):
    return max((float(np.max(a)) for a in _floats(arrays) if a.size), default=0.0)


def preflight(run, precision):
    """`(headroom, findings, notes)` of a float32 `run` under `precision`."""
    dtype, largest, normal, scale = PRECISIONS[precision]
    headroom, findings, notes = {}, [], []
    steepest = (0.0, None)  # the largest gradient within range, and its layer

    def rows(arrays, limit):
        bad = set()
        for a in arrays:
            a = np.asarray(a)
            if np.issubdtype(a.dtype, np.floating) and a.ndim >= 1:
                over = np.abs(np.nan_to_num(a.reshape(a.shape[0], -1))) > limit
                bad.update(int(r) for r in np.nonzero(over.any(-1))[0])
        return tuple(sorted(bad))

    def finding(name, stage, trap, detail, examples=()):
        findings.append(
            Finding(
                layer=name,
                stage=stage,
                trap=trap,
                fix=fix_for(trap),
                mode=run.mode,
                probe=precision,
                detail=detail,
                examples=examples,
            )
        )

    for i, info in enumerate(run.calls):
        if info.node.kind not in ("layer", "op"):
            continue
        name = info.node.name
        peak = _max(run.outputs[i])
        headroom[name] = max(headroom.get(name, 0.0), peak / largest)
        if peak > largest:
            finding(
                name,
                "forward",
                "half_overflow",
                f"its output reaches {peak:.4g} > {dtype} max {largest:.5g}",
                rows(run.outputs[i], largest),
            )
            continue
        nonzero = [a[a > 0] for a in _floats(run.outputs[i])]
        nonzero = [a for a in nonzero if a.size]
        if nonzero and max(float(np.max(a)) for a in nonzero) < normal:
            top = max(float(np.max(a)) for a in nonzero)
            finding(
                name,
                "forward",
                "half_underflow",
                f"its nonzero outputs are all below {normal:.3g} (largest {top:.3g}): "
                f"subnormal or 0 in {dtype}",
            )
            continue
        if run.grads_out is not None:
            grad = _max(run.grads_out[i])
            if grad > largest:
                finding(
                    name,
                    "gradient",
                    "half_overflow",
                    f"the gradient reaching its output reaches {grad:.4g} > {dtype} max "
                    f"{largest:.5g} even at a loss scale of 1",
                    rows(run.grads_out[i], largest),
                )
            elif grad > steepest[0]:
                steepest = (grad, name)
    grad, name = steepest
    if grad * scale > largest:
        fits = scale
        while grad * fits > largest:
            fits /= 2
        skipped = int(round(np.log2(scale / fits)))
        notes.append(
            f"loss scale: the largest gradient reaching a layer output is {grad:.4g} "
            f"({name}); times the initial loss scale {scale:g} it passes {dtype} max "
            f"{largest:.5g}, so LossScaleOptimizer skips about {skipped} step(s) at "
            f"the start, down to a scale of {fits:g} (no finding: the dynamic scale "
            "does this on its own)"
        )
    return headroom, findings, notes
