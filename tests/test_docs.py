"""The documentation: every public name documented and in the API reference.

`mkdocs build --strict` itself runs in `tests/run.sh`; these checks are the
ones a strict build cannot make (a public name without a docstring, a trap
page without its figure), plus the docstring examples, which run as
doctests. The API pages and the design page's API table are generated from
`__all__` by the MkDocs hook `docs/scripts/api_pages.py`: the tests render
them with the hook's own functions.
"""

import configparser
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import keras
import pytest

import keras_stable

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load_hook():
    spec = importlib.util.spec_from_file_location(
        "api_pages_hook", DOCS / "scripts" / "api_pages.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api_pages = _load_hook()
PACKAGES = tuple(keras_stable._SUBMODULES)
# {package: its API page under docs/}, as the hook assigns them.
API_PAGES = {pkg: page for page, pkgs in api_pages.api_pages().items() for pkg in pkgs}

TRAP_PAGES = sorted((DOCS / "traps").glob("*.md"))


def _public(package):
    module = importlib.import_module(f"keras_stable.{package}")
    return module, list(module.__all__)


PUBLIC = [(pkg, name) for pkg in PACKAGES for name in _public(pkg)[1]]


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Overrides conftest's reset: these tests build no Keras state, and
    `clear_session()` after each of them would cost a second apiece."""
    yield


@pytest.mark.parametrize("package", PACKAGES)
def test_all_lists_every_public_attribute(package):
    module, names = _public(package)
    public_attributes = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public_attributes <= set(names), (
        f"keras_stable.{package} exposes {sorted(public_attributes - set(names))} "
        "without listing them in __all__ (and so in the API reference)"
    )
    assert len(names) == len(set(names))


@pytest.mark.parametrize("package,name", PUBLIC, ids=[f"{p}.{n}" for p, n in PUBLIC])
def test_public_name_has_a_docstring(package, name):
    obj = getattr(importlib.import_module(f"keras_stable.{package}"), name)
    # A class must document itself, not inherit keras.layers.Layer's text.
    own = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    assert own and own.strip(), f"keras_stable.{package}.{name} has no docstring"
    summary = own.strip().splitlines()[0]
    assert len(summary) > 10, f"{package}.{name}: one-line summary missing"


@pytest.mark.parametrize("package,name", PUBLIC, ids=[f"{p}.{n}" for p, n in PUBLIC])
def test_public_name_is_in_the_api_reference(package, name):
    page = api_pages.render_api_page(API_PAGES[package])
    assert re.search(rf"^::: keras_stable\.{package}\.{name}\s*$", page, re.MULTILINE), (
        f"the API page docs/{API_PAGES[package]} lacks keras_stable.{package}.{name}"
    )


def test_every_subpackage_has_an_api_page():
    assert set(API_PAGES) == set(PACKAGES)
    written = {p.relative_to(DOCS).as_posix() for p in (DOCS / "api").glob("*.md")}
    # Each page written by hand documents a public subpackage.
    assert written <= set(API_PAGES.values()), written - set(API_PAGES.values())


@pytest.mark.parametrize("page", sorted(set(API_PAGES.values())))
def test_api_reference_names_only_public_objects(page):
    rendered = api_pages.render_api_page(page)
    sharing = [p for p in PACKAGES if API_PAGES[p] == page]
    refs = re.findall(r"^::: (\S+)", rendered, re.MULTILINE)
    for ref in refs:
        module, name = ref.rsplit(".", 1)
        assert module in {f"keras_stable.{p}" for p in sharing}, ref
        assert name in _public(module.split(".", 1)[1])[1], f"{ref} is not public"
    assert len(refs) == len(set(refs)), f"docs/{page} documents a name twice"


def test_a_block_for_a_name_that_is_not_public_is_an_error():
    with pytest.raises(ValueError, match="keras_stable.ops.safe_log"):
        api_pages.render_api_page("api/ops.md", "# ops\n\n::: keras_stable.ops.safe_log\n")


def test_a_page_keeps_its_own_blocks_and_order():
    """A page that writes some blocks itself (to order them) gets the
    missing ones after them, each name once."""
    written = "# audit\n\n::: keras_stable.audit.audit\n\n::: keras_stable.audit.Finding\n"
    rendered = api_pages.render_api_page("api/audit.md", written)
    refs = re.findall(r"^::: keras_stable\.audit\.(\w+)", rendered, re.MULTILINE)
    assert refs[:2] == ["audit", "Finding"]
    assert sorted(refs) == sorted(keras_stable.audit.__all__)


def test_a_new_subpackage_gets_a_page_and_a_nav_entry(monkeypatch):
    """A subpackage with no page in docs/api/ (here the demo, which has an
    `__all__`) gets a generated page, listed under "API reference"."""
    monkeypatch.setattr(api_pages, "subpackages", lambda: [*PACKAGES, "demo"])
    assert api_pages.api_pages()["api/demo.md"] == ["demo"]
    page = api_pages.render_api_page("api/demo.md")
    assert page.startswith("# `keras_stable.demo`\n")
    assert re.search(r"^::: keras_stable\.demo\.main$", page, re.MULTILINE)
    nav = [{"Home": "index.md"}, {"API reference": [{"ops": "api/ops.md"}]}]
    config = api_pages.on_config({"nav": nav})
    section = config["nav"][1]["API reference"]
    assert {"keras_stable.demo": "api/demo.md"} in section
    assert {"keras_stable.audit, keras_stable.callbacks": "api/audit.md"} in section


def test_design_page_lists_every_public_name():
    """The design page's API table is generated: one row per subpackage
    naming each name of its `__all__`, linking to its API page."""
    design = (DOCS / "design.md").read_text(encoding="utf-8")
    assert design.count(api_pages.TABLE_MARKER) == 1
    rendered = api_pages.render_design_page(design)
    rows = {}
    for line in rendered.splitlines():
        match = re.match(r"\| \[`keras_stable\.(\w+)`\]\(([^)]+)\) \| (.*) \|$", line)
        if match:
            package, link, cell = match.groups()
            assert link == API_PAGES[package]
            rows[package] = re.findall(r"`(\w+)`", cell)
    assert set(rows) == set(PACKAGES)
    for package in PACKAGES:
        assert sorted(rows[package]) == sorted(_public(package)[1]), package


def _kernel_op_table():
    """The rows of the design page's table of ops and their kernels (written
    by hand, unlike the table of modules above it)."""
    design = (DOCS / "design.md").read_text(encoding="utf-8")
    start = design.index("| op | kernel (`ops/_kernels/`) | backward |")
    rows = design[start : design.index("\n\n", start)].splitlines()[2:]
    assert rows
    return rows


def test_design_kernel_tables_name_what_the_code_defines():
    """The table of kernel modules is generated (every module, its
    docstring, its names); in the table of ops, every `module.name` of a
    kernel and every torch `*_pass` names a definition of that module."""
    modules = api_pages.kernel_modules()
    table = api_pages.kernel_table()
    for module, (summary, names) in modules.items():
        assert summary, f"keras_stable/ops/_kernels/{module} has no docstring"
        assert f"| `{module}` |" in table
    defined = {
        module[: -len(".py")].replace("/", "."): set(names)
        for module, (_, names) in modules.items()
    }
    checked = 0
    for row in _kernel_op_table():
        kernel_cell = row.split(" | ")[1]
        for ref in re.findall(r"`([\w.]+)`", kernel_cell):
            module, _, name = ref.rpartition(".")
            if module in defined:
                assert name in defined[module], (
                    f"docs/design.md names `{ref}`, which ops/_kernels/"
                    f"{module.replace('.', '/')}.py does not define"
                )
                checked += 1
            elif ref.endswith("_pass"):
                assert any(ref in names for names in defined.values()), ref
                checked += 1
            elif module:
                # Not a kernel module: only a library's own name may be
                # written so (`torch.autograd.Function`, `keras.ops.where`).
                assert module.split(".")[0] in ("torch", "keras", "jax", "tf"), (
                    f"docs/design.md names `{ref}`: no module ops/_kernels/"
                    f"{module.replace('.', '/')}.py"
                )
    assert checked >= 10


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^hooks:\s*\n\s*- docs/scripts/api_pages\.py\s*$", config, re.MULTILINE)
    pages = [
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if "scripts" not in p.parts and "api" not in p.relative_to(DOCS).parts[:1]
    ]
    assert pages
    for page in pages:
        assert re.search(rf":\s*{re.escape(page)}\s*$", config, re.MULTILINE), (
            f"docs/{page} is not in the mkdocs.yml nav"
        )
    assert re.search(r"Benchmarks:\s*benchmarks\.md", config)
    # The API pages: in mkdocs.yml's nav, or added to it by the hook.
    nav = [{"API reference": []}]
    api_pages.on_config({"nav": nav})
    added = {page for entry in nav[0]["API reference"] for page in entry.values()}
    for page in set(API_PAGES.values()):
        listed = re.search(rf":\s*{re.escape(page)}\s*$", config, re.MULTILINE)
        assert listed or page in added, page


@pytest.mark.parametrize("page", TRAP_PAGES, ids=[p.stem for p in TRAP_PAGES])
def test_trap_page_has_its_generated_figure_and_fix(page):
    text = page.read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert images, f"{page.name} has no figure"
    script = (DOCS / "scripts" / "make_plots.py").read_text()
    for image in images:
        path = (page.parent / image).resolve()
        assert path.is_file(), f"{page.name}: {image} missing"
        assert path.name in script, f"{path.name} is not made by make_plots.py"
    for section in (
        "## What goes wrong",
        "## Measured",
        "## The identity used",
        "## The one-line change",
    ):
        assert section in text, f"{page.name} lacks '{section}'"


def test_symptom_index_leads_to_every_trap():
    text = (DOCS / "symptoms.md").read_text()
    for page in TRAP_PAGES:
        assert f"traps/{page.name}" in text, page.name


def test_readme_keeps_the_quick_start_commands():
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[tensorflow-cpu]" && python -m keras_stable.demo' in readme
    assert "bash .ci/run" in readme


def test_readme_and_home_page_lead_a_nan_run_to_the_audit_in_one_step():
    call = "callbacks=[keras_stable.callbacks.NaNAudit()]"
    readme = (ROOT / "README.md").read_text()
    assert readme.index(call) < readme.index("## Quick start")
    home = (DOCS / "index.md").read_text()
    assert home.index(call) < home.index("## See it happen")
    assert "(audit.md)" in home


def _doctests_collected_by_default():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    testpaths = config.get("tool:pytest", "testpaths", fallback="").split()
    return "keras_stable" in testpaths


@pytest.mark.skipif(
    _doctests_collected_by_default(),
    reason="setup.cfg's testpaths already collect the docstrings of keras_stable",
)
def test_docstring_examples_run():
    """Every `>>>` example in keras_stable runs as a doctest.

    `testpaths = tests` keeps `--doctest-modules` away from the package, so
    the doctests run here, in a fresh process on the current backend.
    """
    env = dict(os.environ, KERAS_BACKEND=keras.config.backend())
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--doctest-modules",
            "keras_stable",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
