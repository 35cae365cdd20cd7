"""Every spec of a public class, and the harness module of its kind.

The kind (the spec's type) decides which checks of the harness apply:
`LayerSpec` (weightless layers: tests/harness/layers.py), `LossSpec`
(losses and metrics: tests/harness/losses.py) and `BlockSpec` (layers that
own weights: tests/harness/blocks.py). tests/test_harness.py runs them all;
tests/test_specs.py checks that every public class has a spec.
"""

from tests.harness import blocks
from tests.harness import layers
from tests.harness import losses
from tests.specs.blocks import BLOCK_SPECS
from tests.specs.layers import LAYER_SPECS
from tests.specs.losses import ALL_SPECS as LOSS_AND_METRIC_SPECS

SPECS = LAYER_SPECS + BLOCK_SPECS + LOSS_AND_METRIC_SPECS

KINDS = {layers.LayerSpec: layers, blocks.BlockSpec: blocks, losses.LossSpec: losses}


def kind_of(spec):
    """The harness module whose checks run for `spec`."""
    return KINDS[type(spec)]
