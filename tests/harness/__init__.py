"""The spec harness: every layer, loss and metric is described once by a spec
(tests/specs/), and the checks of its kind run from it.

- `common.py`: the machinery the kinds share (the dtype policies, the config
  and `.keras` round trips, one `fit` step, masks).
- `layers.py`: `LayerSpec` and the checks of the weightless layers.
- `blocks.py`: `BlockSpec` and the checks of the layers that own weights
  (attention, the large-vocabulary head).
- `losses.py`: `LossSpec` and the checks of the losses and metrics.

tests/test_harness.py is the one driver; adding a class means adding its spec.
"""
