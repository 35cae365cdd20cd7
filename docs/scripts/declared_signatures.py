"""Griffe extension: the API reference shows declared constructors.

A loss or metric declares its arguments (`args`, `loss_args`) and its
`__init__` is built from the declaration at import
(`keras_stable.common.arguments.declared_init`), so reading the source
finds only the base class's `__init__`. This extension imports the class
and gives the reference the signature `inspect.signature` gives.
"""

import importlib.util
import inspect
import os
import sys
from pathlib import Path

import griffe

ROOT = str(Path(__file__).resolve().parents[2])
BACKENDS = ("tensorflow", "jax", "torch")


def _choose_backend():
    """Keras imports TensorFlow unless told otherwise: with `KERAS_BACKEND`
    unset, use an installed backend (the signatures are the same on all
    three), so that the docs build with any one of them."""
    if "keras" in sys.modules or os.environ.get("KERAS_BACKEND"):
        return
    for backend in BACKENDS:
        if importlib.util.find_spec(backend) is not None:
            os.environ["KERAS_BACKEND"] = backend
            return


class DeclaredSignatures(griffe.Extension):
    def on_class_members(self, *, cls, **kwargs):
        if "__init__" in cls.members:
            return
        if any(part.startswith("_") for part in cls.path.split(".")):
            # Private: not in the API reference, and some private modules
            # import one backend (`_kernels.torch_attention` imports torch).
            return
        _choose_backend()
        try:
            runtime = griffe.dynamic_import(cls.path, import_paths=[ROOT, *sys.path])
        except ImportError as error:
            # Not swallowed: without the import every declared class loses
            # its signature and the build fails later with one warning per
            # argument, none of which names the cause.
            raise RuntimeError(
                f"docs/scripts/declared_signatures.py: cannot import {cls.path} ({error}). "
                "The API reference imports keras_stable, hence Keras and a backend: "
                'install the docs extra (`pip install -e ".[docs]"`, which brings JAX) '
                "or set KERAS_BACKEND to an installed backend."
            ) from error
        init = vars(runtime).get("__init__") if inspect.isclass(runtime) else None
        signature = getattr(init, "__signature__", None)
        if signature is None:
            return
        parameters = griffe.Parameters(
            *(
                griffe.Parameter(
                    p.name,
                    kind=griffe.ParameterKind(p.kind.description),
                    default=None if p.default is p.empty else repr(p.default),
                )
                for p in signature.parameters.values()
            )
        )
        cls.set_member("__init__", griffe.Function("__init__", parameters=parameters))
