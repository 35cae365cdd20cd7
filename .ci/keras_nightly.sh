#!/usr/bin/env bash
# CI: Keras 3.16 (docs/keras-versions.md). keras-nightly, pinned, in its own
# virtual environment that holds Keras alone and sees the CI environment's
# other packages (the backends, pytest) through a .pth file, so Keras 3.16
# shadows 3.15.1 without reinstalling the backends (keras-nightly and keras
# share the `keras` package folder). Then the tests that touch Keras's
# contract: the Keras-parity tests and Keras's own tests run against our
# classes, masks and CarryMask, saving (integration), the attention layers,
# the audit's tracing, the migration table's rows and the
# harness, on torch; the mask and padding tests on JAX (compiled, as the JAX
# leg runs: the attention layers' use of Keras's hooks is the same Python on
# every backend, and compiled attention on JAX takes minutes); and the
# Keras 3.16 example. About three minutes on 2 cores.
# Run it after `.ci/run` has made the CI environment (or any environment with
# the package's test extra and the three backends): `bash .ci/keras_nightly.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

KERAS_NIGHTLY=keras-nightly==3.16.0.dev2026102704
BASE=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keras_stable_nightly.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS

echo "=== Keras 3.16: $KERAS_NIGHTLY ==="
python -m venv "$WORK/venv"
py="$WORK/venv/bin/python"
site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "import site; site.addsitedir('$BASE')" >"$site/zz_ci_environment.pth"
"$py" -m pip install -q --no-deps "$KERAS_NIGHTLY"
"$py" - <<'EOF'
import keras
from packaging.version import Version

assert Version(keras.__version__) >= Version("3.16.0.dev0"), keras.__version__
print("keras", keras.__version__, "from", keras.__file__)
EOF

status=0
echo "=== Keras 3.16, KERAS_BACKEND=torch ==="
KERAS_BACKEND=torch "$py" -m pytest -q -n "${PYTEST_WORKERS:-auto}" -p no:cacheprovider \
    tests/keras_parity tests/integration tests/layers tests/audit \
    tests/losses/test_keras_adapted_ctc_dice_tversky.py tests/test_migration_table.py \
    tests/test_harness.py || status=1
KERAS_BACKEND=torch "$py" -m pytest -q -p no:cacheprovider tests/test_examples.py \
    -k rnn_padding || status=1
echo "=== Keras 3.16, KERAS_BACKEND=jax ==="
# One process: eleven tests, fewer than the workers would take to start.
KERAS_STABLE_TEST_MODES=compiled KERAS_BACKEND=jax "$py" -m pytest -q -p no:cacheprovider \
    tests/layers/test_carry_mask.py tests/audit/test_padding.py || status=1
echo "=== Keras 3.16: $((SECONDS - start)) s ==="
exit $status
