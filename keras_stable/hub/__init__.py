"""Fine-tune keras-hub models through keras_stable's fused heads.

`FusedCausalLM(causal_lm)` wraps a `keras_hub.models.CausalLM` (Gemma,
GPT-2, Llama, ...) so that `fit` computes its cross-entropy with
`keras_stable.ops.linear_softmax_cross_entropy`, never forming the
`[tokens, vocabulary]` logits. keras-hub is an optional dependency
(`pip install keras_stable[hub]`): this package imports without it, and
raises an `ImportError` saying how to install it when a model is wrapped.
"""

from keras_stable.hub.fused_causal_lm import FusedCausalLM

__all__ = ["FusedCausalLM"]
