"""A new user on a clean machine (issue #38): one backend installed, a wheel
instead of a checkout, the docs built from the docs extra.

The command lines must read their arguments before Keras is imported (Keras
imports TensorFlow unless told otherwise), the package must carry its
license and project URLs, and the docstring examples must be sections that
the API reference renders as code. `.ci/fresh_user.sh` checks the same from
a built wheel in fresh virtual environments.
"""

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from keras_stable import _launch
from keras_stable.audit import pages

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_stable"

# Run in a fresh interpreter before anything else: TensorFlow is "not
# installed" (a `None` in sys.modules is what an absent package looks like
# to both `import` and `importlib.util.find_spec`).
_NO_TENSORFLOW = "import sys\nsys.modules['tensorflow'] = None\n"


def _without_tensorflow(tmp_path, *argv, script=None, timeout=300):
    """Runs `python -m ...argv` (or `script`) with TensorFlow absent,
    KERAS_BACKEND unset and an empty Keras home (no keras.json)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_NO_TENSORFLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERAS_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
        KERAS_HOME=str(tmp_path / "keras_home"),
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    command = [sys.executable, "-c", script, *argv] if script else [sys.executable, *argv]
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


# -- the command lines with one backend (#38, item 13) ----------------------


@pytest.mark.jax
def test_help_and_explain_need_no_backend(tmp_path):
    for argv in (
        ["-m", "keras_stable.demo", "--help"],
        ["-m", "keras_stable.audit", "--help"],
        ["-m", "keras_stable.audit", "--explain", "norm_at_zero"],
    ):
        result = _without_tensorflow(tmp_path, *argv)
        assert result.returncode == 0, (argv, result.stderr[-3000:])
        assert "Traceback" not in result.stderr, argv
    assert result.stdout.startswith("Norm at zero\n")


@pytest.mark.jax
def test_console_script_reads_its_arguments_first(tmp_path):
    # What pip's `keras-stable-demo` script does, under that name.
    script = (
        "import sys\n"
        "sys.argv[0] = '/venv/bin/keras-stable-demo'\n"
        "from keras_stable.demo import main\n"
        "sys.exit(main())\n"
    )
    result = _without_tensorflow(tmp_path, "--help", script=script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--backend" in result.stdout


@pytest.mark.jax
def test_the_default_backend_missing_is_a_one_line_error(tmp_path):
    demo = _without_tensorflow(tmp_path, "-m", "keras_stable.demo", "--steps", "1")
    assert demo.returncode == 2
    assert "Traceback" not in demo.stderr and demo.stderr.count("\n") == 1
    assert "`tensorflow` package, which is not installed" in demo.stderr
    audit = _without_tensorflow(tmp_path, "-m", "keras_stable.audit", "m.keras", "--data", "b.npz")
    assert audit.returncode == 2
    assert "Traceback" not in audit.stderr and audit.stderr.count("\n") == 1
    assert "--backend" in audit.stderr


@pytest.mark.jax
@pytest.mark.slow
def test_demo_and_audit_run_with_jax_only(tmp_path):
    pytest.importorskip("jax")
    demo = _without_tensorflow(
        tmp_path,
        *["-m", "keras_stable.demo", "--backend", "jax", "--steps", "2", "--modes", "eager"],
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "backend jax" in demo.stdout and "restarting" not in demo.stdout
    assert "keras_stable: NaN/inf in 0 of 2 runs" in " ".join(demo.stdout.split())
    # The audit loads a model of keras_stable classes: they are registered
    # once the command line has imported the package with its backend.
    save = (
        "import os, sys\n"
        "os.environ['KERAS_BACKEND'] = 'jax'\n"
        "import keras, numpy as np, keras_stable\n"
        "model = keras.Sequential([keras.Input((4,)), keras_stable.layers.SafeNorm()])\n"
        "model.save('m.keras')\n"
        "keras_stable.audit.save_batch('b.npz', np.zeros((2, 4), 'float32'))\n"
    )
    saved = _without_tensorflow(tmp_path, script=save)
    assert saved.returncode == 0, saved.stderr[-3000:]
    audit = _without_tensorflow(
        tmp_path, "-m", "keras_stable.audit", "m.keras", "--data", "b.npz", "--backend", "jax"
    )
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
    assert "no NaN or inf" in audit.stdout


@pytest.mark.parametrize(
    "argv0,orig_argv,expected",
    [
        ("-m", ["python", "-m", "keras_stable.demo", "--backend", "jax"], "keras_stable.demo"),
        ("-m", ["python", "-X", "dev", "-m", "keras_stable.audit"], "keras_stable.audit"),
        ("-m", ["python", "-mkeras_stable.demo"], "keras_stable.demo"),
        ("-m", ["python", "-m", "pytest", "-m", "keras_stable.demo"], None),
        (
            "/venv/bin/keras-stable-demo",
            ["/venv/bin/python", "/venv/bin/keras-stable-demo"],
            "keras-stable-demo",
        ),
        ("C:\\\\venv\\\\keras-stable-demo.exe", [], "keras-stable-demo"),
        ("train.py", ["python", "train.py", "-m", "keras_stable.demo"], None),
    ],
)
def test_command_line_detection(monkeypatch, argv0, orig_argv, expected):
    monkeypatch.setattr(sys, "argv", [argv0])
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(os.path, "basename", lambda p: re.split(r"[\\\\/]", p)[-1])
    assert _launch.command_line() == expected
    # Keras is imported in this process: nothing to defer.
    assert _launch.defer_keras() is False


def test_no_install_line_assumes_a_checkout_or_pulls_cuda():
    sources = [*sorted((PACKAGE / "demo").glob("*.py")), PACKAGE / "audit" / "cli.py"]
    for path in sources:
        assert "pip install -e" not in path.read_text(), path.name
    assert _launch.INSTALL["torch"].endswith("--index-url https://download.pytorch.org/whl/cpu")
    assert "torch" in _launch.not_installed_message("torch")


# -- packaging (#38, items 12, 15 and 16) -----------------------------------


def _setup_cfg():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def test_license_file_is_the_apache_license():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    metadata = _setup_cfg()["metadata"]
    assert metadata["license"] == "Apache-2.0"
    assert metadata["license_files"].strip() == "LICENSE"


def test_project_urls():
    urls = dict(
        line.split("=", 1) for line in _setup_cfg()["metadata"]["project_urls"].strip().splitlines()
    )
    urls = {name.strip(): url.strip() for name, url in urls.items()}
    assert {"Source", "Documentation", "Changelog", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())


def _extra(name):
    return _setup_cfg()["options.extras_require"][name].split()


def test_docs_extra_brings_a_backend():
    # The API reference imports keras_stable, hence Keras and a backend.
    docs = _extra("docs")
    assert any(req.startswith("jax") for req in docs) and any(
        req.startswith("jaxlib") for req in docs
    )


def test_torch_extra_stops_at_the_tested_version():
    (torch,) = _extra("torch")
    assert torch.startswith("torch>=") and ",<2.14" in torch


# -- the API reference's docstrings (#38, item 14) --------------------------


def test_no_example_title_followed_by_a_blank_line():
    """Google style: `Examples:` then the indented block, no blank line
    (griffe reads `Example:` plus a blank line as plain text, and the
    doctests rendered as nested quotes)."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines[:-1]):
            if re.fullmatch(r"\s*Examples?:\s*", line):
                if line.strip() == "Example:" or not lines[n + 1].strip():
                    offenders.append(f"{path.relative_to(ROOT)}:{n + 1}")
    assert not offenders, offenders


def test_docstring_examples_are_examples_sections():
    griffe = pytest.importorskip("griffe")
    package = griffe.load("keras_stable", search_paths=[str(ROOT)], docstring_parser="google")
    found, misparsed = 0, []

    def walk(obj):
        nonlocal found
        for member in obj.members.values():
            if member.is_alias:
                continue
            if member.docstring and ">>>" in member.docstring.value:
                sections = member.docstring.parse("google", warnings=False)
                if any(s.kind.value == "examples" for s in sections):
                    found += 1
                if any(
                    s.kind.value in ("text", "admonition")
                    and ">>>" in str(getattr(s.value, "contents", s.value))
                    for s in sections
                ):
                    misparsed.append(member.path)
            if member.is_module or member.is_class:
                walk(member)

    walk(package)
    assert not misparsed, misparsed
    assert found >= 70


def test_explain_pages_are_text():
    assert not pages.explain_text("masking").startswith("#")
