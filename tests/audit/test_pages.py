"""The pages the audit's findings point to ship with the package: each is
the documentation site's page, byte for byte (docs/ is the one source), and
`python -m keras_stable.audit --explain TRAP` prints it."""

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from keras_stable.audit import cli
from keras_stable.audit import pages
from keras_stable.audit.report import TRAPS

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "keras_stable" / "audit" / "pages"


def _source(name):
    """The documentation page a packaged page copies."""
    return ROOT / "docs" / ("symptoms.md" if name == "symptoms.md" else f"traps/{name}")


def test_packaged_pages_equal_the_docs():
    shipped = sorted(p.name for p in PACKAGED.glob("*.md"))
    sources = sorted(p.name for p in (ROOT / "docs" / "traps").glob("*.md")) + ["symptoms.md"]
    assert sorted(sources) == shipped, "ship every docs/traps/*.md page (and docs/symptoms.md)"
    for name in shipped:
        assert (PACKAGED / name).read_bytes() == _source(name).read_bytes(), (
            f"keras_stable/audit/pages/{name} differs from {_source(name).relative_to(ROOT)}: "
            f"cp {_source(name).relative_to(ROOT)} keras_stable/audit/pages/{name}"
        )


def test_pages_are_package_data():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["options.package_data"]["keras_stable.audit"].strip() == "pages/*.md"


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
