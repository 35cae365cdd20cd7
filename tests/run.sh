#!/usr/bin/env bash
# The test command: the suite once per Keras backend, the benchmark smoke test
# (`benchmarks/run.py --quick`, every backend, about a minute), then the docs build.
# Extra arguments go to pytest (e.g. `bash tests/run.sh -m "not examples"`).
# Each backend's suite runs on PYTEST_WORKERS pytest-xdist workers (default:
# one per core), and the slowest tests are listed after it.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for backend in tensorflow jax torch; do
    echo "=== KERAS_BACKEND=$backend ==="
    start=$SECONDS
    # One backend-matrix pass (KERAS_STABLE_TEST_MODES, see
    # tests/backend_utils.py): TensorFlow runs the numerical tests eagerly
    # (its own kernels, those of `fit`'s graph mode) and `fit` with XLA
    # (the harness trains every layer and loss with `jit_compile=True`),
    # JAX compiled only (XLA; a JAX user's `fit` is jitted), torch eagerly.
    # The tests about compiling itself run both modes on TensorFlow and JAX
    # whatever the leg. Keras's own tests run against our classes
    # (tests/keras_parity: Python-level contracts, i.e. arguments, shapes,
    # masks, configs) and the docstring examples run on the TensorFlow and
    # torch legs, not again on JAX (optax's parity, a JAX library, does).
    only=()
    modes=eager
    cache=""
    jax_cache=()
    if [ "$backend" = jax ]; then
        only=(--ignore-glob="tests/keras_parity/test_keras_*.py" --ignore=keras_stable)
        modes=compiled
        # JAX's persistent compilation cache, fresh for this run and shared
        # by the workers: the tests compile the same programs from new
        # closures again and again, and a hit skips XLA (about 20% of the
        # JAX leg's time on 2 cores). Nothing outlives the run.
        cache=$(mktemp -d)
        jax_cache=(JAX_COMPILATION_CACHE_DIR="$cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0)
    fi
    env ${jax_cache[@]+"${jax_cache[@]}"} \
    KERAS_STABLE_TEST_MODES=$modes KERAS_BACKEND=$backend python -m pytest -q -n "${PYTEST_WORKERS:-auto}" --durations=15 \
        ${only[@]+"${only[@]}"} "$@" || status=1
    if [ -n "$cache" ]; then rm -rf "$cache"; fi
    echo "=== KERAS_BACKEND=$backend: $((SECONDS - start)) s ==="
done
# The checkout's keras_stable, as pytest imports it (cwd on sys.path).
echo "=== benchmarks/run.py --quick ==="
PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" python benchmarks/run.py --quick || status=1
if [ -f mkdocs.yml ]; then
    echo "=== mkdocs build --strict ==="
    mkdocs build --strict --site-dir "${TMPDIR:-/tmp}/keras_stable_site" || status=1
fi
exit $status
