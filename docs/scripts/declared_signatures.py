"""Griffe extension: the API reference shows declared constructors.

A loss or metric declares its arguments (`args`, `loss_args`) and its
`__init__` is built from the declaration at import
(`keras_stable.common.arguments.declared_init`), so reading the source
finds only the base class's `__init__`. This extension imports the class
and gives the reference the signature `inspect.signature` gives.
"""

import inspect
import sys
from pathlib import Path

import griffe

ROOT = str(Path(__file__).resolve().parents[2])


class DeclaredSignatures(griffe.Extension):
    def on_class_members(self, *, cls, **kwargs):
        if "__init__" in cls.members:
            return
        try:
            runtime = griffe.dynamic_import(cls.path, import_paths=[ROOT, *sys.path])
        except ImportError:
            return
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
