"""Every benchmark row, in the order of the table, and the quick set.

The rows themselves are in `cases_core.py` (norms, softmax family,
cross-entropies, element-wise ops, task distance; their layers and losses)
`cases_catalogue.py` (the catalogue, geometry and metric learning),
`cases_attention.py` (attention), `cases_sequences.py` (CTC, Dice,
Tversky), `cases_log_space.py` (the log-space ops),
`cases_entropy_sparsemax.py` (entropy, sparsemax) and `cases_densities.py`
(the VAE KL, the mixture NLL), none of them in the quick set.
"""

from cases_attention import attention_cases
from cases_catalogue import catalogue_cases
from cases_catalogue import geometry_cases
from cases_core import cross_entropy_ops
from cases_core import distance_ops
from cases_core import elementwise_ops
from cases_core import layer_cases
from cases_core import loss_cases
from cases_core import norm_ops
from cases_core import softmax_ops
from cases_densities import density_cases
from cases_entropy_sparsemax import entropy_sparsemax_cases
from cases_log_space import log_space_cases
from cases_sequences import sequence_cases

# `--quick`, the smoke test of CI: one row per family (the `group` of the
# targets), covering an op, a layer and losses, the native torch path of the
# sparse cross-entropy and the TF Addons transcriptions.
QUICK = (
    "layers.L2Normalize",  # norm
    "log_softmax",  # softmax
    "losses.StableSparseSoftmaxCrossEntropy",  # cross_entropy
    "safe_divide",  # elementwise
    "losses.MaskedHuber",  # regression
    "losses.ContrastiveLoss",  # geometry
)


def cases(quick=False):
    """Every row (ops, layers, losses, then the catalogue and geometry), or
    with `quick` only the rows of `QUICK`."""
    rows = (
        norm_ops()
        + softmax_ops()
        + cross_entropy_ops()
        + elementwise_ops()
        + distance_ops()
        + layer_cases()
        + loss_cases()
        + catalogue_cases()
        + geometry_cases()
        + attention_cases()
        + sequence_cases()
        + log_space_cases()
        + entropy_sparsemax_cases()
        + density_cases()
    )
    if not quick:
        return rows
    by_name = {case.name: case for case in rows}
    unknown = [name for name in QUICK if name not in by_name]
    if unknown:
        raise ValueError(f"QUICK names rows that do not exist: {unknown}")
    return [by_name[name] for name in QUICK]
