"""The spec harness: every layer, loss and metric is described once by a spec,
and the same checks run from it for every class.

- `common.py`: the machinery both kinds share (parametrisation by spec, the
  dtype policies, eager/compiled modes, the config and `.keras` round trips,
  one `fit` step, masks).
- `layers.py` and `layer_specs.py`: `LayerSpec`, the layer checks, and one
  spec per layer class (driven by `tests/layers/test_harness.py`).
- `losses.py` and `loss_specs.py`: `LossSpec`, the loss and metric checks,
  and the specs of every loss and metric (driven by `tests/test_harness.py`).

Adding a class means adding its spec; every check then runs for it.
"""
