"""MkDocs hook: the API reference and the design page's API table, from `__all__`.

Registered in `mkdocs.yml` (`hooks:`). Each public subpackage (`keras_stable._SUBMODULES`) has a page of the API
reference, `docs/api/<package>.md`: a title and a few lines of prose written
by hand, to which this hook adds one `::: keras_stable.<package>.<name>`
block per name of the package's `__all__`, in that order, at the marker
`<!-- api: keras_stable.<package> -->` or else at the end of the page. A
page may document a second package with that package's marker
(`api/audit.md` holds `keras_stable.callbacks`), and may write some blocks
itself (to order them): only the names it lacks are added, and a block for
a name that is not public is an error. A subpackage with no page gets a
generated one (its title and its docstring's first paragraph), added to
the nav's "API reference" section.

In `docs/design.md`, the marker `<!-- api: table -->` becomes the table of
the public API: one row per subpackage, its names grouped by the module that
defines them (`norms: ...`) where a module defines several; the marker
`<!-- kernels: table -->` becomes the table of the modules of
`keras_stable/ops/_kernels/` (sub-packages included): each module's
docstring summary and the names it defines, read from the source.

`tests/test_docs.py` renders the pages with the functions below and checks
that every public name is documented.
"""

import ast
import importlib
import inspect
import logging
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NAV_SECTION = "API reference"
TABLE_MARKER = "<!-- api: table -->"
# `<!-- api: keras_stable.ops -->`, or with a note: `<!-- api: keras_stable.ops (...) -->`.
_MARKER = re.compile(r"^<!-- api: keras_stable\.(\w+)(?: [^>]*)? -->[ \t]*$", re.MULTILINE)
_BLOCK = re.compile(r"^::: keras_stable\.(\w+)\.(\w+)[ \t]*$", re.MULTILINE)

log = logging.getLogger("mkdocs.hooks.api_pages")


def _keras_stable():
    """Imports keras_stable (the checkout's, with an installed backend when
    KERAS_BACKEND is unset, as `declared_signatures.py` chooses it)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if "keras" not in sys.modules and not os.environ.get("KERAS_BACKEND"):
        for backend in ("tensorflow", "jax", "torch"):
            if importlib.util.find_spec(backend) is not None:
                os.environ["KERAS_BACKEND"] = backend
                break
    return importlib.import_module("keras_stable")


def subpackages():
    """The public subpackages, in `keras_stable._SUBMODULES`'s order."""
    return list(_keras_stable()._SUBMODULES)


def public_names(package):
    """The package's `__all__`."""
    return list(importlib.import_module(f"keras_stable.{package}").__all__)


def _page(path):
    """A page's path under docs/ ("api/ops.md")."""
    return Path(path).as_posix()


def _written(page):
    file = DOCS / page
    return file.read_text(encoding="utf-8") if file.is_file() else None


def api_pages():
    """{page under docs/: the packages it documents}, for every public
    subpackage: `api/<package>.md`, unless another page holds the package's
    marker."""
    packages = subpackages()
    pages = {}
    claimed = {}
    for file in sorted((DOCS / "api").glob("*.md")):
        for package in _MARKER.findall(file.read_text(encoding="utf-8")):
            claimed[package] = _page(file.relative_to(DOCS))
    for package in packages:
        page = claimed.get(package, f"api/{package}.md")
        pages.setdefault(page, []).append(package)
    return pages


def _generated_page(package):
    """The page of a subpackage that has none: title and the first
    paragraph of its docstring."""
    module = importlib.import_module(f"keras_stable.{package}")
    doc = inspect.cleandoc(module.__doc__ or "").split("\n\n")[0]
    return f"# `keras_stable.{package}`\n\n{doc}\n"


def render_api_page(page, markdown=None):
    """The page's Markdown with a `:::` block for every public name of the
    packages it documents. Raises ValueError for a block naming anything
    else."""
    packages = api_pages().get(page, [])
    if markdown is None:
        markdown = _written(page)
        if markdown is None:
            markdown = _generated_page(packages[0])
    for package, name in _BLOCK.findall(markdown):
        if package not in packages or name not in public_names(package):
            raise ValueError(
                f"docs/{page}: `::: keras_stable.{package}.{name}` is not a public name "
                f"of {', '.join(f'keras_stable.{p}' for p in packages) or 'a package of this page'}"
            )
    for package in packages:
        present = {name for p, name in _BLOCK.findall(markdown) if p == package}
        blocks = "".join(
            f"::: keras_stable.{package}.{name}\n\n"
            for name in public_names(package)
            if name not in present
        )
        marker = re.compile(
            rf"^<!-- api: keras_stable\.{package}(?: [^>]*)? -->[ \t]*$\n?", re.MULTILINE
        )
        if marker.search(markdown):
            markdown = marker.sub(lambda _: blocks, markdown, count=1)
        elif blocks:
            markdown = markdown.rstrip("\n") + "\n\n" + blocks
    return markdown.rstrip("\n") + "\n"


def api_table():
    """The design page's table of the public API (Markdown)."""
    rows = ["| module | names |", "|---|---|"]
    pages = {package: page for page, packages in api_pages().items() for package in packages}
    for package in subpackages():
        module = importlib.import_module(f"keras_stable.{package}")
        names = public_names(package)
        homes = {}
        for name in names:
            home = getattr(getattr(module, name), "__module__", "") or ""
            homes.setdefault(home.rsplit(".", 1)[-1], []).append(name)
        if len(homes) < len(names):
            cell = "; ".join(
                f"{home}: " + ", ".join(f"`{n}`" for n in group)
                for home, group in sorted(homes.items())
            )
        else:
            cell = ", ".join(f"`{n}`" for n in names)
        rows.append(f"| [`keras_stable.{package}`]({pages[package]}) | {cell} |")
    return "\n".join(rows) + "\n"


# -- the design page's table of the kernel modules ---------------------------

KERNELS = ROOT / "keras_stable" / "ops" / "_kernels"
KERNEL_TABLE_MARKER = "<!-- kernels: table -->"


def kernel_modules():
    """{path under ops/_kernels/ ("norms.py", "torch/native.py"): (the first
    paragraph of its docstring, the names it defines without a leading
    underscore)}, read from the source (no import: some import torch)."""
    modules = {}
    for file in sorted(KERNELS.rglob("*.py")):
        if file == KERNELS / "__init__.py" or "__pycache__" in file.parts:
            continue  # the package's own __init__ (a sub-package's is listed)
        tree = ast.parse(file.read_text(encoding="utf-8"))
        summary = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
        names = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names += [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
        names = [n for n in names if not n.startswith("_")]
        modules[file.relative_to(KERNELS).as_posix()] = (summary, names)
    return modules


def kernel_table():
    """The design page's table of the modules of `ops/_kernels/` (Markdown):
    each module's docstring summary and the names it defines."""
    rows = ["| module of `ops/_kernels/` | what it holds | defines |", "|---|---|---|"]
    for module, (summary, names) in kernel_modules().items():
        cell = summary.replace("|", "\\|")
        rows.append(f"| `{module}` | {cell} | {', '.join(f'`{n}`' for n in names)} |")
    return "\n".join(rows) + "\n"


def render_design_page(markdown):
    """docs/design.md with its two generated tables."""
    for marker, table in ((TABLE_MARKER, api_table), (KERNEL_TABLE_MARKER, kernel_table)):
        if markdown.count(marker) != 1:
            raise ValueError(f"docs/design.md must hold the marker {marker} once")
        markdown = markdown.replace(marker, table().rstrip("\n"))
    return markdown


# -- MkDocs events ------------------------------------------------------------


def _nav_pages(nav):
    for entry in nav or []:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from _nav_pages(value)
        else:
            yield value


def on_config(config):
    """Adds the API pages missing from the nav to its "API reference"."""
    nav = config.get("nav")
    if not nav:
        return config
    listed = set(_nav_pages(nav))
    section = next((e[NAV_SECTION] for e in nav if isinstance(e, dict) and NAV_SECTION in e), None)
    if section is None:
        section = []
        nav.append({NAV_SECTION: section})
    for page, packages in api_pages().items():
        if page not in listed:
            section.append({", ".join(f"keras_stable.{p}" for p in packages): page})
    return config


def on_files(files, config):
    """A generated page for each subpackage that has none in docs/api/."""
    from mkdocs.structure.files import File

    for page, packages in api_pages().items():
        if files.get_file_from_path(page) is None:
            files.append(File.generated(config, page, content=_generated_page(packages[0])))
    return files


def on_page_markdown(markdown, page, config, files):
    path = _page(page.file.src_uri)
    try:
        if path in api_pages():
            return render_api_page(path, markdown)
        if path == "design.md":
            return render_design_page(markdown)
    except ValueError as error:
        log.warning(str(error))  # a warning fails `mkdocs build --strict`
    return markdown
