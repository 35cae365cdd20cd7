"""The loop over blocks that the blockwise kernels share (the linear
cross-entropy over vocabulary blocks, attention over key blocks)."""

from keras import ops


def for_each_block(length, chunk_size, body, state):
    """Runs `state = body(start, size, state)` over blocks of `length`.

    Whole blocks go through `keras.ops.fori_loop` (a compiled loop, so XLA
    keeps one block alive at a time instead of scheduling them all at
    once; `start` is traced there); a partial last block runs once more
    with its own static size.
    """
    full, rest = length // chunk_size, length % chunk_size

    def loop_body(i, state):
        return body(i * chunk_size, chunk_size, state)

    if full:
        state = ops.fori_loop(0, full, loop_body, state)
    if rest:
        state = body(full * chunk_size, rest, state)
    return state
