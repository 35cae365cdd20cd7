"""The import structure of `keras_stable`, read from its source.

- No import circle: the graph of the package's own imports (every `import`
  and `from ... import` statement of a module, at module level or inside a
  function: a function-level import that closes a circle is one too, only
  deferred) has no cycle. An edge goes to the module a statement names:
  `from keras_stable.ops._kernels.dispatch import fused` is an edge to
  `...dispatch`, `from keras_stable.ops import _kernels` to
  `keras_stable.ops._kernels` (a submodule), `from keras_stable.ops._kernels
  import fused` to the package `keras_stable.ops._kernels` (its
  `__init__`). The parent packages Python initialises first are not
  edges: every package's `__init__` imports its own modules, which import
  their siblings through the package path, and counting those would make
  each package a circle with itself.
- The backends are imported where CONTRIBUTING.md's "Only `keras.ops`"
  rule says, and nowhere else: torch by the torch sub-package of the
  kernels (`keras_stable/ops/_kernels/torch/`) alone at module load, and
  lazily (inside a function) by the audit's autodiff; JAX by the sharded
  head and lazily by the audit; TensorFlow lazily by the replica count of
  `common/reduction.py` and by the audit. `keras.src` never.
- `import keras_stable` (and a call of each kernel family) under
  `KERAS_BACKEND=jax` loads no torch, in a fresh process.
"""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_stable"
TORCH_PACKAGE = "keras_stable.ops._kernels.torch"

# Where each backend may be imported besides the torch sub-package:
# module -> "module" (at module load) or "function" (inside a function only).
BACKEND_IMPORTS = {
    "torch": {"keras_stable.audit.execution": "function"},
    "jax": {
        "keras_stable.ops._kernels.sharded": "module",
        "keras_stable.audit.execution": "function",
    },
    "tensorflow": {
        "keras_stable.common.reduction": "function",
        "keras_stable.audit.execution": "function",
    },
}


def _modules():
    """{dotted name: path} of every module of the package."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imports(module):
    """`(name imported, at module level, line)` for each name an import
    statement of `module` names (`a.b` for `import a.b`, `a.b.c` for `from
    a.b import c`), relative imports resolved."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node, module_level):
        for child in ast.iter_child_nodes(node):
            inside = module_level and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            if isinstance(child, ast.Import):
                found.extend((a.name, inside, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package
                    for _ in range(child.level - 1):
                        parent = parent.rpartition(".")[0]
                    base = f"{parent}.{base}" if base else parent
                found.extend((f"{base}.{a.name}", inside, child.lineno) for a in child.names)
                found.append((base, inside, child.lineno))
            visit(child, inside)

    visit(tree, True)
    return found


def _own_edges(module):
    """The modules of the package that `module` imports (see the module
    docstring for what counts)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges = set()
    # `from a.b import c`: the edge is `a.b.c` when it is a module, else `a.b`.
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in MODULES:
                    name = name.rpartition(".")[0]
                if name:
                    edges.add(name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    edges.add(full)
                elif base in MODULES:
                    edges.add(base)
    edges.discard(module)
    return edges


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan),
    each sorted; a module importing itself is not counted."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def test_the_analysis_sees_the_package():
    """The graph is read from the real source: a known edge of each kind is
    in it (a module-level one, a function-level one, a submodule named by
    `from package import module`)."""
    assert len(MODULES) > 50
    assert "keras_stable.ops._kernels.dispatch" in _own_edges("keras_stable.ops._kernels.norms")
    assert "keras_stable.ops._kernels.sharded" in _own_edges("keras_stable.ops._kernels.dispatch")
    assert TORCH_PACKAGE in _own_edges("keras_stable.ops._kernels.dispatch")
    assert "keras_stable.ops._kernels" in _own_edges("keras_stable.ops.softmax")
    # The cycle finder finds one.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    graph = {module: _own_edges(module) for module in MODULES}
    assert _cycles(graph) == []


def _backend_imports():
    """{(backend, module): {"module" or "function" for each statement}} for
    every import of TensorFlow, JAX or torch in the package."""
    found = {}
    for module in MODULES:
        for name, module_level, line in _imports(module):
            root = name.partition(".")[0]
            if root in BACKEND_IMPORTS and name not in MODULES:
                where = "module" if module_level else "function"
                found.setdefault((root, module), set()).add((where, line))
    return found


def test_backends_are_imported_only_where_contributing_says():
    for (backend, module), places in sorted(_backend_imports().items()):
        in_torch_package = module == TORCH_PACKAGE or module.startswith(TORCH_PACKAGE + ".")
        if backend == "torch" and in_torch_package:
            continue
        allowed = BACKEND_IMPORTS[backend].get(module)
        assert allowed is not None, f"{module} imports {backend} (lines {sorted(places)})"
        if allowed == "function":
            assert {where for where, _ in places} == {"function"}, (
                f"{module} imports {backend} at module load (lines {sorted(places)}): "
                "only lazily, inside a function"
            )


def test_only_the_torch_sub_package_imports_torch_at_module_load():
    torch_modules = {
        module
        for (backend, module), places in _backend_imports().items()
        if backend == "torch" and any(where == "module" for where, _ in places)
    }
    assert torch_modules, "the torch sub-package imports torch"
    assert all(m == TORCH_PACKAGE or m.startswith(TORCH_PACKAGE + ".") for m in torch_modules)


def test_no_module_imports_keras_src():
    for module in MODULES:
        names = [name for name, _, _ in _imports(module)]
        assert not [n for n in names if n == "keras.src" or n.startswith("keras.src.")], module


def test_only_dispatch_switches_on_the_backend_in_ops():
    """In `keras_stable/ops` the backend is read by `_kernels/dispatch.py`
    alone (the torch sub-package and the JAX sharded head run on their
    backend only, and are imported by it)."""
    ops = PACKAGE / "ops"
    readers = set()
    for path in ops.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "backend.backend()" in text or "config.backend()" in text:
            readers.add(path.relative_to(ops).as_posix())
    assert readers == {"_kernels/dispatch.py"}


def test_import_keras_stable_on_jax_loads_no_torch():
    """A fresh process with `KERAS_BACKEND=jax`: importing the package and
    running a kernel of each family (through `dispatch`) imports no torch
    module."""
    pytest.importorskip("jax")
    code = """
import sys
import numpy as np
import keras_stable
from keras_stable import layers, losses, metrics, ops
x = np.arange(12, dtype="float32").reshape(3, 4)
ops.safe_norm(x, axis=-1)
ops.softmax(x)
ops.softmax_cross_entropy(ops.softmax(x), x)
ops.pairwise_distance(x)
ops.dot_product_attention(x[None, :, None], x[None, :, None], x[None, :, None], chunk_size=2)
ops.linear_softmax_cross_entropy(x, x.T, np.array([0, 1, 2]))
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print("torch modules:", loaded)
sys.exit(1 if loaded else 0)
"""
    env = dict(os.environ, KERAS_BACKEND="jax")
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "torch modules: []" in result.stdout
