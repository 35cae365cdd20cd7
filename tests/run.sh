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
    # One backend-matrix pass: TensorFlow runs every test eagerly and
    # compiled (XLA), torch eagerly, JAX compiled only (a JAX user's `fit` is
    # jitted; KERAS_STABLE_TEST_MODES, see tests/backend_utils.py), and the
    # kernels' edge grid, compiled on the TensorFlow leg, is not rerun on JAX.
    only=()
    modes=""
    cache=""
    jax_cache=()
    if [ "$backend" = jax ]; then
        only=(-k "not (test_edge_grid_of_cases_py and compiled)")
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
