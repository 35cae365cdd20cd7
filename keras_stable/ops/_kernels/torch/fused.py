"""PyTorch's `dispatch.fused`: a kernel as one `torch.autograd.Function`.

`TorchFused` runs a kernel's native pass (`passes.py`, or the kernel's own
`keras.ops` pair kept whole with `dispatch.fused(keep=True)`) where it
applies, else its `keras.ops` `(forward, backward)`, whose backward
recomputes the forward from the saved inputs. The backward also runs that
way where autograd differentiates it again (`create_graph=True`) or under
`torch.compile`, so that second order goes through autograd.
"""

import torch


def torch_fused(forward, backward, native, inputs):
    """The `dispatch.fused` of PyTorch: `native` where it applies, else the
    `keras.ops` kernel `(forward, backward)`."""
    return TorchFused.apply((forward, backward, native), *inputs)


class TorchFused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kernel, *inputs):
        forward, _, native = kernel
        # Symbolic shapes (meta tensors) and tracing by torch.compile or
        # torch.export (no data-dependent branches there) take the
        # `keras.ops` kernel.
        traced = inputs[0].is_meta or torch.compiler.is_compiling()
        result = None if native is None or traced else native[0](*inputs)
        ctx.kernel, ctx.native = kernel, result is not None
        output, saved = result if ctx.native else (forward(*inputs)[0], ())
        tensors = [isinstance(v, torch.Tensor) for v in saved]
        ctx.layout = tensors
        ctx.values = [v for v, t in zip(saved, tensors) if not t]
        ctx.save_for_backward(*inputs, *(v for v, t in zip(saved, tensors) if t))
        ctx.n_inputs = len(inputs)
        return output

    @staticmethod
    def backward(ctx, upstream):
        forward, backward, native = ctx.kernel
        stored = ctx.saved_tensors
        inputs, tensors = stored[: ctx.n_inputs], iter(stored[ctx.n_inputs :])
        values = iter(ctx.values)
        saved = [next(tensors) if t else next(values) for t in ctx.layout]
        grads = None
        if ctx.native and not torch.is_grad_enabled() and not torch.compiler.is_compiling():
            needs = ctx.needs_input_grad[1:]
            grads = native[1](inputs, saved, upstream.to(inputs[-1].dtype), needs)
        if grads is None:
            output, saved = forward(*inputs)
            grads = backward(inputs, saved, output, upstream)
        return (None, *grads)
