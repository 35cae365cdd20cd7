#!/usr/bin/env bash
# CI: a new user on a clean machine (issue #38). From a wheel built here,
# in a fresh virtual environment with Keras and JAX only (no TensorFlow, no
# torch): the demo, its console script and the audit's command line. Then
# the docs in strict mode from a virtual environment with the docs extra
# only (which brings JAX, the one backend). About two minutes, most of it
# pip installing the local wheels. The wheel is built with the calling
# environment's `python` (any Python with pip).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keras_stable_fresh.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS

echo "=== fresh user: wheel ==="
# Built from a copy of the checkout's files (tracked and not ignored), so
# that nothing is built in the checkout itself: .ci/run runs this script
# while it installs the package there.
mkdir "$WORK/src"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$WORK/src"
python -m pip wheel -q --no-deps --wheel-dir "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/keras_stable-*.whl)
unzip -l "$WHEEL" | grep -q "LICENSE" || { echo "the wheel has no LICENSE"; exit 1; }
# The audit's pages, copied from docs/ by setup.py's build step (the listing
# read once: `grep -q` closing the pipe early fails it under pipefail).
unzip -l "$WHEEL" >"$WORK/wheel.txt"
for page in docs/symptoms.md docs/traps/*.md; do
    grep -q "keras_stable/audit/pages/${page#docs/}" "$WORK/wheel.txt" ||
        { echo "the wheel has no ${page#docs/} page"; exit 1; }
done

echo "=== fresh user: keras + jax only, from the wheel ==="
"$PYTHON" -m venv "$WORK/jax"
"$WORK/jax/bin/python" -m pip install -q "keras==3.15.1" "jax==0.10.2" "jaxlib==0.10.2" "$WHEEL"
# Run outside the checkout, with no Keras configuration and no backend set:
# the installed package, as a user sees it.
(
    cd "$WORK"
    unset KERAS_BACKEND
    export KERAS_HOME="$WORK/keras_home" TF_CPP_MIN_LOG_LEVEL=3
    py="$WORK/jax/bin/python"
    "$py" -c "import importlib.util as u; assert u.find_spec('tensorflow') is None and u.find_spec('torch') is None"
    "$py" -m keras_stable.demo --help >/dev/null
    "$WORK/jax/bin/keras-stable-demo" --help >/dev/null
    "$py" -m keras_stable.audit --help >/dev/null
    "$py" -m keras_stable.audit --explain norm_at_zero >explain.txt
    if grep -nE '\]\(|^#|docs/scripts/|\.\./img' explain.txt; then
        echo "--explain printed Markdown or repository paths"; exit 1
    fi
    "$py" -m keras_stable.demo --backend jax --steps 3 | tee demo.txt
    grep -q "keras_stable: NaN/inf in 0 of" demo.txt
    "$WORK/jax/bin/keras-stable-demo" --backend jax --steps 2 --modes eager --no-audit >/dev/null
)

echo "=== fresh user: docs from the docs extra (one backend) ==="
"$PYTHON" -m venv "$WORK/docs"
"$WORK/docs/bin/python" -m pip install -q "keras==3.15.1" "jax==0.10.2" "jaxlib==0.10.2" "$WORK/src[docs]"
(
    unset KERAS_BACKEND
    export KERAS_HOME="$WORK/keras_home" TF_CPP_MIN_LOG_LEVEL=3
    "$WORK/docs/bin/mkdocs" build --strict --site-dir "$WORK/site"
)
echo "=== fresh user: $((SECONDS - start)) s ==="
