#!/usr/bin/env bash
# GPU check for keras_stable: the XLA and mixed-precision tests and the
# benchmarks on the JAX backend, in about 8 minutes.
#
# Prepared for a machine with an NVIDIA GPU, JAX for CUDA, PyTorch and
# Triton, but no TensorFlow and no Keras, that cannot download anything.
# Keras and its missing pure-Python dependencies travel with the repository
# as wheels (collected beforehand with the `download` mode, on a machine
# that can reach PyPI).
#
# Usage:
#   bash benchmarks/gpu_check.sh download [DIR]
#       Collect the wheels into DIR (default benchmarks/wheels, about 10 MB):
#       keras 3.15.1 and the dependencies a CUDA JAX image may lack.
#       PY_VERSIONS="3.10 3.11 3.12" picks the CPython versions of the few
#       binary wheels (default: this interpreter's).
#   bash benchmarks/gpu_check.sh [WHEELS_DIR]
#       On the GPU machine: install from WHEELS_DIR (default $WHEELS or
#       benchmarks/wheels) whatever is missing, then run the checks.
#   bash benchmarks/gpu_check.sh --cpu      (or QUICK=1)
#       The same script end to end on the CPU with the current Python
#       (e.g. PYTHON=/work/venv/bin/python), with `run.py --quick`: a dry
#       run of everything but the device.
#
# Environment:
#   PYTHON      interpreter to use (default python3)
#   OUT         folder for the results (default benchmarks/gpu_out)
#   SELECT      pytest -k expression of the tests to run
#               (default "jit or compiled or xla or mixed or float16 or bfloat16")
#   TEST_TIMEOUT, BENCH_TIMEOUT   seconds for each step (default 200 / 270)
#   BENCH_ARGS  extra arguments for benchmarks/run.py
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PYTHON=${PYTHON:-python3}
KERAS_VERSION=${KERAS_VERSION:-3.15.1}

# Wheels a CUDA JAX image may lack: keras, its own dependencies (numpy,
# ml-dtypes and packaging usually come with JAX), the dependencies of rich,
# and pytest with hypothesis for the test suite.
PURE=(
    "keras==$KERAS_VERSION" absl-py namex rich markdown-it-py mdurl pygments
    packaging pytest pluggy iniconfig hypothesis sortedcontainers
)
BINARY=(optree h5py ml-dtypes)

if [ "${1:-}" = "download" ]; then
    DIR=${2:-benchmarks/wheels}
    mkdir -p "$DIR"
    "$PYTHON" -m pip download --no-deps -d "$DIR" "${PURE[@]}" || exit 1
    versions=${PY_VERSIONS:-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
    for v in $versions; do
        "$PYTHON" -m pip download --no-deps -d "$DIR" --only-binary=:all: \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux_2_28_x86_64 --python-version "$v" \
            "${BINARY[@]}" || exit 1
    done
    ls -la "$DIR"
    du -sh "$DIR"
    exit 0
fi

QUICK=${QUICK:-0}
WHEELS=${WHEELS:-benchmarks/wheels}
for arg in "$@"; do
    case "$arg" in
        --cpu | --quick) QUICK=1 ;;
        *) WHEELS=$arg ;;
    esac
done
OUT=${OUT:-benchmarks/gpu_out}
mkdir -p "$OUT"
SELECT=${SELECT:-"jit or compiled or xla or mixed or float16 or bfloat16"}
TEST_TIMEOUT=${TEST_TIMEOUT:-200}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-270}
export KERAS_BACKEND=jax
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
# Allocate on demand, so one process does not hold 75% of the GPU and the
# memory figures are not skewed by a preallocated pool.
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
export TF_CPP_MIN_LOG_LEVEL=2
status=0
start=$(date +%s)
log() { echo "[$(($(date +%s) - start))s] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

# 1. Install what is missing, from the carried wheels only.
missing=()
for mod in keras:"keras==$KERAS_VERSION" absl:absl-py namex:namex rich:rich \
    markdown_it:markdown-it-py mdurl:mdurl pygments:pygments optree:optree \
    h5py:h5py ml_dtypes:ml-dtypes packaging:packaging pytest:pytest \
    pluggy:pluggy iniconfig:iniconfig hypothesis:hypothesis \
    sortedcontainers:sortedcontainers; do
    "$PYTHON" -c "import ${mod%%:*}" 2>/dev/null || missing+=("${mod#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing from $WHEELS: ${missing[*]}"
    if [ ! -d "$WHEELS" ]; then
        log "ERROR: no wheel folder $WHEELS (collect it with: bash benchmarks/gpu_check.sh download)"
        exit 1
    fi
    # Every missing package is listed, so --no-deps is complete; into a
    # folder of our own, so that neither permissions nor an externally
    # managed system Python get in the way.
    SITE="$OUT/site-packages"
    mkdir -p "$SITE"
    export PYTHONPATH="$SITE:$PYTHONPATH"
    if ! "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" \
        --no-deps --target "$SITE" "${missing[@]}"; then
        # E.g. a binary wheel for another Python: install the rest one by
        # one (h5py is only needed for .keras saving).
        for pkg in "${missing[@]}"; do
            "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" \
                --no-deps --target "$SITE" "$pkg" \
                || log "WARNING: could not install $pkg"
        done
    fi
fi
"$PYTHON" -c "import keras" || { log "ERROR: keras does not import"; exit 1; }

# 2. What we run on.
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee -a "$OUT/summary.txt"
"$PYTHON" - <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import jax, keras
print("jax", jax.__version__, "devices", jax.devices())
print("keras", keras.__version__, "backend", keras.backend.backend())
EOF
if [ "$QUICK" != 1 ] && ! "$PYTHON" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')"; then
    log "WARNING: JAX sees no GPU; the results below are for the CPU"
fi

# 3. The XLA and mixed-precision tests, on the JAX backend.
log "pytest -k \"$SELECT\" (timeout ${TEST_TIMEOUT}s)"
timeout "$TEST_TIMEOUT" "$PYTHON" -m pytest -q -p no:cacheprovider \
    -o addopts="" -k "$SELECT" tests >"$OUT/pytest.txt" 2>&1
rc=$?
tail -n 25 "$OUT/pytest.txt"
log "pytest exit code $rc$([ $rc = 124 ] && echo ' (timed out)')"
[ $rc = 0 ] || [ $rc = 5 ] || status=1

# 4. The benchmarks, float32, bfloat16 and float16.
if [ "$QUICK" = 1 ]; then
    bench=(--quick --dtypes float32,bfloat16)
else
    # S is dispatch-bound on a GPU: M and L show the kernels.
    bench=(--sizes M,L --dtypes float32,bfloat16,float16 --reps 10)
fi
log "benchmarks/run.py ${bench[*]} ${BENCH_ARGS:-} (timeout ${BENCH_TIMEOUT}s)"
# shellcheck disable=SC2086
timeout "$BENCH_TIMEOUT" "$PYTHON" benchmarks/run.py --backend jax "${bench[@]}" \
    ${BENCH_ARGS:-} --out "$OUT/benchmarks_jax.md" --json "$OUT/benchmarks_jax.json" \
    2>"$OUT/benchmarks_stderr.txt"
rc=$?
tail -n 5 "$OUT/benchmarks_stderr.txt"
log "benchmarks exit code $rc$([ $rc = 124 ] && echo ' (timed out)')"
[ $rc = 0 ] || status=1
[ -f "$OUT/benchmarks_jax.md" ] && cat "$OUT/benchmarks_jax.md"
log "done, status $status; results in $OUT"
exit $status
