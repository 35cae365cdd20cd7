"""Fused forward/backward passes (private to `keras_stable.ops`).

The one place where keras_stable writes gradients by hand, one module per
kernel family, each checked in the tests against the portable `keras.ops`
formulation (values and gradients), which stays the reference:

- `attention.py`: `dot_product_attention`'s blockwise path (an online
  softmax over key blocks; the backward recomputes them from the saved
  log-sum-exp);
- `ctc.py`: the CTC forward algorithm in log space over a compiled scan,
  with its alpha-beta backward;
- `norms.py`: `safe_norm`, `l2_normalize`, `cosine_similarity` (with the
  power-of-two rescue of a sum of squares that left the range, whose
  table `RESCUE` is in `shared.py`);
- `softmax.py`: `softmax`, `log_softmax`, `logsumexp`;
- `cross_entropy.py`: the dense `softmax_cross_entropy`;
- `linear_cross_entropy.py`: the fused linear cross-entropy (a large
  vocabulary one block at a time), whose block loops are in `head.py`;
- `linear_entropy.py`: the entropy of the same head's softmax, per token,
  over the same blocks;
- `pairwise.py`: `pairwise_distance` (explicit differences, a per-pair
  rescue, the closed-form gradient);
- `sharded.py`: the fused linear cross-entropy with its vocabulary
  sharded over a JAX `ModelParallel` mesh (`jax.shard_map`; imported only
  on JAX);
- `blocks.py`: the compiled loop over blocks the blockwise kernels share;
- `shared.py`: the constants and helpers several families share (`RESCUE`,
  `soft_cap`), a leaf that imports no other module of the package;
- `dispatch.py`: the one backend switch (`fused`, `native_pass`,
  `native_op`, `kernels_enabled`, and the questions the kernels ask about
  the backend);
- `torch/`: PyTorch's native passes, fused cross-entropies and CTC, and
  attention by torch's kernels, in two explicit tables (`PASSES`, `OPS`):
  the only package that imports torch (imported by `dispatch.py` only when
  the backend is torch).
"""

from keras_stable.ops._kernels.attention import attention_kernel
from keras_stable.ops._kernels.attention import causal_mask
from keras_stable.ops._kernels.cross_entropy import softmax_cross_entropy_kernel
from keras_stable.ops._kernels.ctc import UNREACHABLE
from keras_stable.ops._kernels.ctc import ctc_log_likelihood
from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.dispatch import kernels_enabled
from keras_stable.ops._kernels.dispatch import native_op
from keras_stable.ops._kernels.dispatch import native_pass
from keras_stable.ops._kernels.dispatch import sharded_linear_cross_entropy
from keras_stable.ops._kernels.dispatch import vocabulary_sharding
from keras_stable.ops._kernels.head import HeadOptions
from keras_stable.ops._kernels.linear_cross_entropy import linear_cross_entropy_kernel
from keras_stable.ops._kernels.linear_entropy import linear_entropy_kernel
from keras_stable.ops._kernels.norms import cosine_kernel
from keras_stable.ops._kernels.norms import l2_normalize_kernel
from keras_stable.ops._kernels.norms import norm_kernel
from keras_stable.ops._kernels.pairwise import pairwise_kernel
from keras_stable.ops._kernels.shared import soft_cap
from keras_stable.ops._kernels.softmax import log_softmax_kernel
from keras_stable.ops._kernels.softmax import logsumexp_kernel
from keras_stable.ops._kernels.softmax import softmax_kernel

__all__ = [
    "UNREACHABLE",
    "ctc_log_likelihood",
    "attention_kernel",
    "causal_mask",
    "soft_cap",
    "cosine_kernel",
    "fused",
    "kernels_enabled",
    "l2_normalize_kernel",
    "HeadOptions",
    "linear_cross_entropy_kernel",
    "linear_entropy_kernel",
    "log_softmax_kernel",
    "logsumexp_kernel",
    "native_op",
    "native_pass",
    "sharded_linear_cross_entropy",
    "vocabulary_sharding",
    "norm_kernel",
    "pairwise_kernel",
    "softmax_cross_entropy_kernel",
    "softmax_kernel",
]
