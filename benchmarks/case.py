"""What a benchmark row is: `Case`, and the factories its candidates use.

The row modules (`cases.py`, `cases_catalogue.py`) import from here, and
nothing here imports them: imports go one way, `inputs.py` and `case.py`
first, then the rows, then `timing.py` and `run.py`.
"""


class Case:
    """One benchmark row: keras_stable's callable and its built-ins.

    `build(shape, dtype, rng)` returns `(args, diff)`: NumPy arrays and the
    index of the argument to differentiate. `ours` and each built-in are
    factories `f(backend_modules) -> callable(*args)`, or `None` when the
    counterpart does not exist on this backend. The first built-in that
    exists is the primary one.
    """

    def __init__(self, name, kind, group, sizes, build, ours, builtins):
        self.name = name
        self.kind = kind
        self.group = group
        self.sizes = sizes
        self.build = build
        self.ours = ours
        self.builtins = builtins


def stable_class(module, name, *args, **kwargs):
    """Factory for a keras_stable class, or None if it does not exist yet."""

    def factory(m):
        cls = getattr(getattr(m.ks, module), name, None)
        if cls is None:
            return None
        return cls(*args, **kwargs)

    factory.missing = lambda m: getattr(getattr(m.ks, module), name, None) is None
    factory.label = f"keras_stable.{module}.{name}"
    return factory


def labelled_like(factory, named):
    """`factory` with the `missing`/`label` of another factory `named` (a
    wrapper of a `stable_class` reports that class)."""
    factory.missing = getattr(named, "missing", lambda m: False)
    factory.label = getattr(named, "label", None)
    return factory


def tf_only(make):
    def factory(m):
        return make(m) if m.backend == "tensorflow" else None

    return factory


def K(m):
    """The `keras` module of the backend modules `m`."""
    return m.keras
