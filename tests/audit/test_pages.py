"""The pages the audit's findings point to ship with the package: each is
the documentation site's page, byte for byte (docs/ is the one source,
copied into the package when it is built: setup.py), and
`python -m keras_stable.audit --explain TRAP` prints it."""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from keras_stable.audit import cli
from keras_stable.audit import pages
from keras_stable.audit.report import TRAPS

ROOT = Path(__file__).resolve().parents[2]
# What a wheel is built from (setup.py copies the pages into the package).
BUILD_INPUTS = ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE")


def _source(name):
    """The documentation page a page of the package copies."""
    return ROOT / "docs" / ("symptoms.md" if name == "symptoms.md" else f"traps/{name}")


def _sources():
    return sorted(p.name for p in (ROOT / "docs" / "traps").glob("*.md")) + ["symptoms.md"]


def test_a_checkout_reads_the_pages_from_docs():
    """Nothing is committed twice: in a checkout (or an editable install)
    the package has no copy and reads docs/."""
    assert not (ROOT / "keras_stable" / "audit" / "pages").exists(), (
        "keras_stable/audit/pages/ is made by the build (setup.py), not kept in the tree"
    )
    found = pages._pages()
    assert sorted(found) == sorted(_sources())
    for name, file in found.items():
        assert Path(str(file)) == _source(name)
    assert sorted(pages.page_names()) == sorted(n[: -len(".md")] for n in _sources())


def _copy_build_inputs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "keras_stable", src / "keras_stable", ignore=shutil.ignore_patterns("__pycache__")
    )
    (src / "docs").mkdir()
    shutil.copy2(ROOT / "docs" / "symptoms.md", src / "docs" / "symptoms.md")
    shutil.copytree(ROOT / "docs" / "traps", src / "docs" / "traps")
    return src


def _run(*command, cwd, env=None):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _wheel_pages(wheel):
    with zipfile.ZipFile(wheel) as archive:
        prefix = "keras_stable/audit/pages/"
        return {
            name[len(prefix) :].rsplit("/", 1)[-1]: archive.read(name)
            for name in archive.namelist()
            if name.startswith(prefix)
        }


@pytest.mark.jax  # packaging: nothing backend-specific, one CI leg is enough
def test_the_wheel_and_the_sdist_carry_the_pages(tmp_path):
    """A wheel built from the tree, and one built from the sdist, hold every
    page byte for byte; installed (no docs/ next to it), the package reads
    its own copy."""
    src = _copy_build_inputs(tmp_path)
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    _run(*pip_wheel, "--wheel-dir", str(tmp_path / "dist"), str(src), cwd=tmp_path)
    _run(sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "sdist"), cwd=src)
    (sdist,) = (tmp_path / "sdist").glob("*.tar.gz")
    _run(*pip_wheel, "--wheel-dir", str(tmp_path / "from_sdist"), str(sdist), cwd=tmp_path)
    wheels = [*(tmp_path / "dist").glob("*.whl"), *(tmp_path / "from_sdist").glob("*.whl")]
    assert len(wheels) == 2
    for wheel in wheels:
        shipped = _wheel_pages(wheel)
        assert sorted(shipped) == sorted(_sources()), wheel.parent.name
        for name, data in shipped.items():
            assert data == _source(name).read_bytes(), (wheel.parent.name, name)

    site = tmp_path / "site"
    with zipfile.ZipFile(wheels[0]) as archive:
        archive.extractall(site)
    script = (
        "from keras_stable.audit import pages\n"
        "print(pages._pages()['norm-at-zero.md'])\n"
        "print(pages.page_text('norm_at_zero'), end='')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONIOENCODING": "utf-8"}
    out = _run(sys.executable, "-c", script, cwd=tmp_path, env=env).stdout
    path, text = out.split("\n", 1)
    assert Path(path) == site / "keras_stable" / "audit" / "pages" / "traps" / "norm-at-zero.md"
    assert text == _source("norm-at-zero.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("trap", sorted(TRAPS))
def test_every_trap_has_a_page_with_a_title(trap):
    text = pages.page_text(trap)
    assert text == _source(TRAPS[trap]["doc"]).read_text(encoding="utf-8")
    title = pages.page_title(trap)
    assert text.startswith(f"# {title}\n")
    assert pages.reference(trap) == f'"{title}" (python -m keras_stable.audit --explain {trap})'


def test_explain_prints_the_page_and_exits_0(capsys):
    assert cli.main(["--explain", "norm_at_zero", "--markdown"]) == 0
    out, err = capsys.readouterr()
    assert out == (ROOT / "docs" / "traps" / "norm-at-zero.md").read_text(encoding="utf-8")
    assert err == ""
    assert cli.main(["--explain", "distances"]) == 0  # a page by name
    out, _ = capsys.readouterr()
    assert out.startswith("Distances, correlations and metric learning\n=====")


@pytest.mark.parametrize("name", pages.page_names())
def test_explain_prints_text_without_repository_paths(name):
    """In a wheel install there is no docs/ next to the package: no
    Markdown link targets, images, tables or plotting-script paths."""
    text = pages.explain_text(name)
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("    "))
    prose = re.sub(r"`[^`]*`", "", prose)  # code spans keep their `x**2`
    for raw in ("](", "![", "|---", "../img", "docs/scripts/", ".md)", "**"):
        assert raw not in prose, (name, raw)
    assert not text.startswith("#")
    for line in text.splitlines():
        if "`examples/" in line or "`tests/" in line:
            assert "(in the keras_stable source repository)" in text


def test_explain_links_to_other_pages_by_command():
    text = pages.explain_text("symptoms")
    assert "Norm at zero (python -m keras_stable.audit --explain norm-at-zero)" in text


def test_explain_of_an_unknown_name_exits_2(capsys):
    assert cli.main(["--explain", "nan_everywhere"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "unknown trap or page 'nan_everywhere'" in err and "norm_at_zero" in err
    assert len(err.strip().splitlines()) == 1


def test_a_model_without_data_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["model.keras"])
    assert exit_info.value.code == 2
    assert "--data" in capsys.readouterr().err


@pytest.mark.tensorflow
def test_explain_from_the_command_line():
    """Prints a packaged page: nothing backend-specific, so one fresh
    process on the TensorFlow CI leg is enough."""
    result = subprocess.run(
        [sys.executable, "-m", "keras_stable.audit", "--explain", "half_overflow_typo"],
        capture_output=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        cwd=ROOT,
    )
    assert result.returncode == 2 and result.stdout == ""
    result = subprocess.run(
        [sys.executable, "-m", "keras_stable.audit", "--explain", "zero_times_inf"],
        capture_output=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        cwd=ROOT,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("Masking: 0 × inf and 0 × NaN\n=====")
