"""What the audit found: `Finding` and `AuditReport` (the traps they name
are in `catalogue.py`)."""

import dataclasses

from keras_stable.audit.catalogue import TRAPS
from keras_stable.audit.pages import reference

STAGES = ("forward", "gradient")
MODES = ("eager", "compiled")
# The stress probes (`keras_stable.audit.probes`), named here, where the
# command line reads them without importing Keras.
PROBES = ("zeros", "coincident", "large", "masked", "mixed_float16", "mixed_bfloat16")


def fix_for(trap, kind="layer"):
    """The keras_stable replacement for `trap` in a layer or in the loss."""
    entry = TRAPS[trap]
    return entry["loss_fix"] if kind == "loss" else entry["fix"]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One place where a value or a gradient first turned NaN or inf.

    Attributes:
        layer: the name of the layer (`"outer/inner"` inside a nested
            model), of the functional operation, of the loss (`"loss"`), or
            of the model itself when the non-finite value comes from code in
            its own `call()` between its layers.
        stage: `"forward"` (a value) or `"gradient"` (a gradient of the loss).
        trap: a short id: `"norm_at_zero"`, `"exp_overflow"`,
            `"zero_times_inf"`, `"epsilon_underflow"`, `"fully_masked_row"`,
            `"unshifted_softmax"`, or `"unknown"` when the evidence does not
            point to one of them.
        fix: the keras_stable replacement.
        mode: `"eager"` or `"compiled"` (XLA on TensorFlow, `jax.jit` on JAX).
        probe: `None` for the batch as given, else the stress probe that
            made it fire (`"zeros"`, `"coincident"`, `"large"`, `"masked"`,
            `"mixed_float16"`, `"mixed_bfloat16"`).
        detail: the evidence, in words (which input, how many entries).
        page: the page that explains it, where it is not the trap's own
            (a fully masked row inside attention: `"attention"`), else None.
        examples: the rows `i` of the batch such that running row `i` alone
            makes this call's value (forward) or gradient (gradient)
            non-finite, or that hold the offending labels
            (`label_out_of_range`); empty where no single row does (a trap
            coupled across the batch).
    """

    layer: str
    stage: str
    trap: str
    fix: str
    mode: str
    probe: str | None = None
    detail: str = ""
    examples: tuple = ()
    page: str | None = None

    def as_dict(self):
        """The finding as a plain dict (JSON-ready)."""
        result = dataclasses.asdict(self)
        result["examples"] = [int(i) for i in self.examples]
        return result


@dataclasses.dataclass
class AuditReport:
    """The result of `keras_stable.audit.audit`.

    Attributes:
        findings: list of `Finding`, in the order the runs were made (the
            batch as given, eager then compiled, then each stress probe).
        modes: the modes that ran (`"eager"`, `"compiled"`).
        probes: the stress probes that ran (empty without `stress=True`).
        notes: what could not run and why (a mode that does not compile, a
            probe that does not apply to this model).
        backend: the Keras backend.
        headroom: with `precision=`, every layer's max |output| in the
            float32 run over the half dtype's max (above 1 overflows);
            empty otherwise.
        warnings: what is wrong without a NaN, in words: padded steps
            that reach the loss because `y_pred` has no mask (Keras 3.16's
            RNN layers drop it). They do not change `ok`.
    """

    findings: list = dataclasses.field(default_factory=list)
    modes: list = dataclasses.field(default_factory=list)
    probes: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    backend: str = ""
    headroom: dict = dataclasses.field(default_factory=dict)
    warnings: list = dataclasses.field(default_factory=list)

    @property
    def ok(self):
        """`True` when no value or gradient went non-finite."""
        return not self.findings

    def as_dict(self):
        """The report as a plain dict (JSON-ready)."""
        return {
            "ok": self.ok,
            "backend": self.backend,
            "modes": list(self.modes),
            "probes": list(self.probes),
            "notes": list(self.notes),
            "findings": [f.as_dict() for f in self.findings],
            "headroom": {k: float(v) for k, v in self.headroom.items()},
            "warnings": list(self.warnings),
        }

    def __str__(self):
        return format_report(self)


_COLUMNS = ("layer", "stage", "mode", "probe", "trap", "fix")


def _table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def _groups(findings):
    """Findings that differ only in mode and probe, together (in order)."""
    groups = {}
    for f in findings:
        groups.setdefault((f.layer, f.stage, f.trap, f.fix), []).append(f)
    return list(groups.values())


def _joined(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return ", ".join(seen)


def format_report(report):
    """`str(report)`: a header, a table (one row per layer, stage and trap,
    with the modes and probes where it fired), the evidence, the notes."""
    ran = ", ".join(report.modes) or "no mode"
    if report.probes:
        ran += "; probes: " + ", ".join(report.probes)
    backend = f" on {report.backend}" if report.backend else ""
    if report.ok:
        lines = [f"keras_stable audit{backend}: no NaN or inf ({ran})."]
    else:
        # The count is that of the table's rows: a finding that fired in
        # several modes or probes is one row.
        groups = _groups(report.findings)
        count = len(groups)
        lines = [
            f"keras_stable audit{backend}: {count} finding{'s' * (count != 1)} ({ran})",
            "",
        ]
        rows = [_COLUMNS]
        for group in groups:
            first = group[0]
            modes = _joined(f.mode for f in group)
            probes = _joined(f.probe or "-" for f in group)
            rows.append((first.layer, first.stage, modes, probes, first.trap, first.fix))
        lines += _table(rows)
        lines.append("")
        for n, group in enumerate(groups, 1):
            detail = group[0].detail or "no further evidence"
            lines.append(f"{n}. {group[0].layer}, {group[0].stage}: {detail}")
            rows = sorted({int(i) for f in group for i in f.examples})
            if rows:
                shown = ", ".join(map(str, rows[:20])) + (" ..." if len(rows) > 20 else "")
                lines.append(f"   examples (rows of the batch): {shown}")
        # One reference per page (two traps can share one), in page order.
        first = {}
        for f in report.findings:
            doc = f"{f.page}.md" if f.page else TRAPS[f.trap]["doc"]
            first.setdefault(doc, f.page or f.trap)
        lines += ["", "Read: " + ", ".join(reference(first[doc]) for doc in sorted(first))]
    if report.headroom:
        top = sorted(report.headroom.items(), key=lambda kv: -kv[1])[:3]
        shown = ", ".join(f"{name} {value:.3g}" for name, value in top)
        lines += ["", f"headroom (max |output| / dtype max, highest first): {shown}"]
    if report.warnings:
        lines.append("")
        lines += [f"warning: {warning}" for warning in report.warnings]
    if report.notes:
        lines.append("")
        lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)
