"""The documentation: every public name documented and in the API reference.

`mkdocs build --strict` itself runs in `tests/run.sh`; these checks are the
ones a strict build cannot make (a public name nobody wrote a `:::` block
for, a missing docstring, a trap page without its figure), plus the
docstring examples, which run as doctests.
"""

import configparser
import importlib
import inspect
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import keras
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGES = ("ops", "layers", "losses", "metrics", "audit", "callbacks")
# The API page of a package, where it is not docs/api/<package>.md: the
# callbacks share the audit's page.
API_PAGES = {"callbacks": "audit"}


def _api_page(package):
    return DOCS / "api" / f"{API_PAGES.get(package, package)}.md"


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
    page = _api_page(package).read_text()
    assert re.search(rf"^::: keras_stable\.{package}\.{name}\s*$", page, re.MULTILINE), (
        f"docs/api/{_api_page(package).name} lacks `::: keras_stable.{package}.{name}`"
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_api_reference_names_only_public_objects(package):
    page = _api_page(package)
    sharing = [p for p in PACKAGES if _api_page(p) == page]
    for ref in re.findall(r"^::: (\S+)", page.read_text(), re.MULTILINE):
        module, name = ref.rsplit(".", 1)
        assert module in {f"keras_stable.{p}" for p in sharing}, ref
        assert name in _public(module.split(".", 1)[1])[1], f"{ref} is not public"


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "scripts" not in p.parts]
    assert pages
    for page in pages:
        assert re.search(rf":\s*{re.escape(page)}\s*$", config, re.MULTILINE), (
            f"docs/{page} is not in the mkdocs.yml nav"
        )
    assert re.search(r"Benchmarks:\s*benchmarks\.md", config)


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
