"""Whether this process is one of keras_stable's command lines, started
before Keras was imported.

Keras reads its backend once, when it is first imported, and its default
backend is TensorFlow. `import keras_stable` imports Keras, and
`python -m keras_stable.demo --backend jax` imports the `keras_stable`
package before the demo can read `--backend`: with only JAX (or only torch)
installed, that import failed with `No module named 'tensorflow'` before
any argument was read. So when the process is one of the command lines
below, and Keras is not imported yet, `keras_stable` and
`keras_stable.audit` leave their Keras imports to the command line, which
reads its arguments, sets `KERAS_BACKEND` and then imports them
(`keras_stable._import_submodules`). Any other import of the package is
unchanged. Nothing here imports Keras.
"""

import os
import sys

# `python -m MODULE`, and the console scripts of setup.cfg.
COMMAND_MODULES = ("keras_stable.demo", "keras_stable.audit")
CONSOLE_SCRIPTS = ("keras-stable-demo",)


def _dash_m_module():
    """The module of `python -m MODULE` while Python locates it, or None.

    While `-m` imports the parents of its module, `sys.argv[0]` is `"-m"`;
    `sys.orig_argv` holds the interpreter's own arguments.
    """
    if not sys.argv or sys.argv[0] != "-m":
        return None
    argv = list(getattr(sys, "orig_argv", ()))
    for n, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[n + 1] if n + 1 < len(argv) else None
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:]
    return None


def _console_script():
    """The console script's name (`keras-stable-demo`), or None."""
    if not sys.argv or not sys.argv[0]:
        return None
    name = os.path.basename(sys.argv[0])
    for suffix in ("-script.pyw", "-script.py", ".exe"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name if name in CONSOLE_SCRIPTS else None


def command_line():
    """`keras_stable.demo`, `keras_stable.audit` or `keras-stable-demo` when
    this process runs that command line, else None."""
    module = _dash_m_module()
    if module is not None:
        for command in COMMAND_MODULES:
            if module == command or module.startswith(command + "."):
                return command
        return None
    return _console_script()


def defer_keras():
    """True when the package must not import Keras yet: a command line of
    keras_stable is starting and will choose the backend first."""
    return "keras" not in sys.modules and command_line() is not None


# How to install each backend, for the command lines' errors. torch: the CPU
# build from PyTorch's index (PyPI's Linux wheel is the CUDA build, with
# about 3 GB of CUDA libraries). Install lines that work from a wheel as
# well as from a checkout.
INSTALL = {
    "tensorflow": "pip install tensorflow-cpu",
    "jax": "pip install jax",
    "torch": "pip install torch --index-url https://download.pytorch.org/whl/cpu",
}


def not_installed_message(backend):
    """The one-line error for a backend whose package is not installed."""
    line = INSTALL.get(backend, f"pip install {backend}")
    note = (
        " (the CPU build; PyPI's Linux wheel brings about 3 GB of CUDA libraries)"
        if backend == "torch"
        else ""
    )
    return (
        f"the {backend} backend needs the `{backend}` package, which is not "
        f"installed: `{line}`{note}, or pass another --backend."
    )
