"""PyTorch: the only package of keras_stable that imports torch (at module
load), imported by `dispatch.py` only when the backend is torch.

- `fused.py`: `TorchFused`, the `dispatch.fused` of PyTorch (a kernel as
  one `torch.autograd.Function`, its native pass where it applies);
- `passes.py`: the native pass of each `keras.ops` kernel, torch's own
  fused ops (`PASSES` below);
- `losses.py`: torch's fused cross-entropies and CTC where they give the
  portable formulation's values;
- `attention.py`: `dot_product_attention` by torch's kernels (the
  blockwise path as torch's fused attention, the materialised one in exact
  blocks of query rows).

The two tables below are the whole interface: `dispatch.native_pass(name,
*args)` calls `PASSES[name](*args)` (a `(forward, backward)` pair for
`fused`), `dispatch.native_op(name, *args)` calls `OPS[name](*args)` (a
tensor, or None where torch's kernel does not give the portable
formulation's values). A name missing here is a `KeyError` on torch, not a
silent fallback.
"""

from keras_stable.ops._kernels.torch import attention
from keras_stable.ops._kernels.torch import losses
from keras_stable.ops._kernels.torch import passes
from keras_stable.ops._kernels.torch.fused import torch_fused

# The kernel (of `ops/_kernels/`) -> its native pass.
PASSES = {
    "norm": passes.norm_pass,
    "l2_normalize": passes.l2_normalize_pass,
    "cosine": passes.cosine_pass,
    "softmax": passes.softmax_pass,
    "log_softmax": passes.log_softmax_pass,
    "logsumexp": passes.logsumexp_pass,
    "softmax_cross_entropy": passes.softmax_cross_entropy_pass,
}

# The public op's computation -> torch's fused op (None where it declines).
OPS = {
    "sparse_cross_entropy": losses.native_sparse_cross_entropy,
    "sigmoid_cross_entropy": losses.native_sigmoid_cross_entropy,
    "ctc_loss": losses.native_ctc_loss,
    "ctc_loss_over_frames": losses.native_ctc_loss_over_frames,
    "attention": attention.native_attention,
    "materialised_attention": attention.native_materialised_attention,
}

__all__ = ["OPS", "PASSES", "torch_fused"]
