"""Attention over 32768 keys: a step that fits in memory only blockwise.

The built-in attention (`keras.ops.dot_product_attention`, and
`keras.layers.MultiHeadAttention` on CPU, on a TPU without a splash kernel,
or on a GPU with a mask) materialises the `(B, N, T, S)` weights in
float32, and its gradient needs them again: at `T = S = 32768` with two
heads that is 8 GiB for the logits alone, and XLA's plan for the built-in's
value and gradient is about 32 GiB: more than a 24 GiB machine has.
`keras_stable.ops.dot_product_attention` takes its blockwise path past 1024
keys (an online softmax over blocks of 256 keys, and a backward pass that
recomputes them), and needs 0.3 GiB for the same step (XLA's plan, JAX).

The script runs that step (value and gradient with respect to the query,
the key and the value; compiled on TF and JAX, eager on torch), checks that
every number is finite, and compares four query rows of the output with a
float64 NumPy computation over all the keys. On JAX it also prints XLA's
memory plan of both steps at 32768 keys (compiled, never run).

    KERAS_BACKEND=jax python examples/attention_long_sequence.py

`--keys 4096` runs the step over fewer keys (still the blockwise path) and
keeps XLA's plans at 32768: CI runs it that way (the full step takes about
two minutes on 2 CPU cores).
"""

import argparse
import time

import keras
import numpy as np

import keras_stable

B, T, N, H = 1, 32768, 2, 16


def step(q, k, v):
    """`sum(attention(q, k, v) * w)` and its gradients (the attention with
    Keras's `scale = 1 / sqrt(H)`), for the backend in use."""
    backend = keras.backend.backend()
    w = keras.ops.cos(keras.ops.arange(H, dtype="float32"))

    def loss(q, k, v):
        return keras.ops.sum(keras_stable.ops.dot_product_attention(q, k, v) * w)

    if backend == "jax":
        import jax

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def run(q, k, v):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                value = loss(q, k, v)
            return value, tape.gradient(value, [q, k, v])

        return run(tf.constant(q), tf.constant(k), tf.constant(v))
    import torch

    q, k, v = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    value = loss(q, k, v)
    value.backward()
    return value, (q.grad, k.grad, v.grad)


def reference_rows(q, k, v, rows):
    """The output at `rows`, in float64 NumPy: `(len(rows), N, H)`."""
    q, k, v = (np.asarray(a, "float64") for a in (q, k, v))
    logits = np.einsum("rnh,snh->nrs", q[0, rows], k[0]) / np.sqrt(H)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("nrs,snh->rnh", p, v[0])


def jax_memory_plans():
    """XLA's buffer plan (GiB) of the value and gradient at `(B, T, N, H)`:
    ours, Keras's (compiled from shapes alone, never run)."""
    import jax

    q = k = v = jax.ShapeDtypeStruct((B, T, N, H), "float32")

    def plan(attention):
        def loss(q, k, v):
            return jax.numpy.sum(attention(q, k, v))

        compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile()
        m = compiled.memory_analysis()
        total = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
        return total / 2**30

    return plan(keras_stable.ops.dot_product_attention), plan(keras.ops.dot_product_attention)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=T, help="keys (= queries) of the step run")
    keys = parser.parse_args().keys
    print(f"the built-in's float32 logits at {T} keys: {B * N * T * T * 4 / 2**30:.1f} GiB")
    if keras.backend.backend() == "jax":
        ours, theirs = jax_memory_plans()
        print(
            f"XLA's plan, value and gradient at {T} keys: "
            f"keras_stable {ours:.2f} GiB, Keras {theirs:.1f} GiB"
        )
        assert theirs > 24 > 10 * ours, (ours, theirs)

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, keys, N, H)).astype("float32") for _ in range(3))
    rows = [0, 1, keys // 2 - 1, keys - 1]  # the query rows checked against float64
    print(f"attention at (B, T=S, N, H) = {(B, keys, N, H)}, {keras.backend.backend()}")

    start = time.perf_counter()
    value, grads = step(q, k, v)
    value = float(keras.ops.convert_to_numpy(value))
    grads = [keras.ops.convert_to_numpy(g) for g in grads]
    print(f"value and gradient in {time.perf_counter() - start:.1f} s: loss {value:.4f}")
    assert np.isfinite(value) and all(np.isfinite(g).all() for g in grads)

    out = keras.ops.convert_to_numpy(keras_stable.ops.dot_product_attention(q, k, v))
    error = np.max(np.abs(out[0, rows] - reference_rows(q, k, v, rows)))
    print(f"rows {rows} against float64: max abs error {error:.1e}")
    assert error < 1e-5, error
    print("ok")


if __name__ == "__main__":
    main()
