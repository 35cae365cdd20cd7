"""Constructor arguments declared once: signature, checks and config.

A loss (or a metric) lists its own arguments as `Arg`s, in signature
order; `declared_init` builds the class's `__init__` from that list and
the Keras arguments that follow (`reduction`, `name`, `dtype`). The
constructor then has the real signature (`inspect.signature`, `help`,
positional and keyword calls, the API reference), each argument is checked
once at construction, and `get_config` returns the checked values: nothing
about an argument is written twice.
"""

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any
from typing import NamedTuple

from keras_stable.common.checks import check_bool

_PARAMETER = inspect.Parameter.POSITIONAL_OR_KEYWORD


class Arg(NamedTuple):
    """One constructor argument.

    Attributes:
        name: the argument's name (also its attribute and config key).
        default: its default value.
        check: `check(value) -> value`, the validation at construction: it
            returns the value to store (normalised, plain JSON) or raises a
            `ValueError` naming the argument. None stores the value as given.
    """

    name: str
    default: Any = None
    check: Callable[[Any], Any] | None = None

    def read(self, value):
        return value if self.check is None else self.check(value)


def flag(name, default):
    """A boolean argument: `True` or `False`, a `ValueError` otherwise."""
    return Arg(name, default, functools.partial(check_bool, name=name))


def snake_case(name):
    """`InfoNCELoss` -> `info_nce_loss`, as Keras names its objects."""
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def declared_init(cls, args, keras_args, base_init):
    """The `__init__` of `cls` with signature `(self, *args, *keras_args)`.

    `args` and `keras_args` are sequences of `Arg`; a keras arg whose
    default is None under the name `name` defaults to the class name in
    snake case (`"contrastive_loss"`). The constructor binds its call to
    that signature (a `TypeError` for an unknown or missing argument, as a
    written-out `__init__` gives) and calls `base_init(self, **arguments)`
    with every argument by keyword.
    """
    parameters = [inspect.Parameter("self", _PARAMETER)]
    for arg in (*args, *keras_args):
        default = arg.default
        if arg.name == "name" and default is None:
            default = snake_case(cls.__name__)
        parameters.append(inspect.Parameter(arg.name, _PARAMETER, default=default))
    signature = inspect.Signature(parameters)

    def __init__(self, *positional, **keywords):
        bound = signature.bind(self, *positional, **keywords)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments["self"]
        base_init(self, **arguments)

    __init__.__signature__ = signature
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    __init__.__doc__ = f"Constructs a `{cls.__name__}` (see the class docstring)."
    return __init__


def checked(args, arguments, owner):
    """`{name: checked value}` for the declared `args`, in their order.

    `arguments` maps names to the values given; an undeclared one is a
    `TypeError` naming `owner` (a class name), as Python gives for a
    written-out `__init__`.
    """
    names = {arg.name for arg in args}
    unknown = sorted(set(arguments) - names)
    if unknown:
        raise TypeError(f"{owner}() got unexpected keyword arguments {unknown}.")
    return {arg.name: arg.read(arguments.get(arg.name, arg.default)) for arg in args}
