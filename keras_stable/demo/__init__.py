"""See the NaN traps happen, and not happen, in one command.

Run ``python -m keras_stable.demo`` (or the console script
``keras-stable-demo``). It trains the two models keras_stable was built
from, each with the plain Keras formulation and with keras_stable, eagerly
(``run_eagerly=True``) and compiled (``jit_compile=True``), and prints a
table: the step at which each run first produced a NaN or inf loss
or weight, and its first and final loss.

1. **Masked multi-task regression** (trap 1, the norm at zero). 30 tasks, one
   active per step: the model's 30 outputs are multiplied by a task mask, and
   the loss is the one of the bug report::

       dist = keras.ops.norm(y_true - y_pred, axis=0)   # one norm per task
       loss = keras.ops.mean(dist**2)

   29 of the 30 columns are all zero, and the gradient of the norm there is
   ``0 / 0``. The keras_stable run changes one line,
   ``loss=keras_stable.losses.MaskedMultiTaskDistance(per="task",
   squared=True)``: the same value, step for step, with no NaN.
2. **Small classifier with a hand-written softmax** (trap 2, overflow). A
   2-3-2 network with large initial weights, trained on
   ``-sum(y * log(exp(s) / sum(exp(s))))``: logits above ~88 overflow
   ``exp`` in float32 and the loss is NaN at the first step. The
   keras_stable run uses
   ``loss=keras_stable.losses.StableSoftmaxCrossEntropy()`` on the logits.

Nothing is hard-coded: every cell of the table is measured on the backend in
use. Options: ``--backend {tensorflow,jax,torch}`` (default: the
``KERAS_BACKEND`` environment variable, else tensorflow), ``--steps N``,
``--modes eager,jit``, ``--plot FILE.png`` (needs matplotlib).

One module per concern: :mod:`~keras_stable.demo.scenarios` (the plain and
keras_stable models of the bug reports), :mod:`~keras_stable.demo.training`
(the runs), :mod:`~keras_stable.demo.report` (table, summary, plot),
:mod:`~keras_stable.demo.backend` (choosing the Keras backend) and
:mod:`~keras_stable.demo.cli` (the command line, :func:`main`).

Keras reads its backend once, when it is first imported. This package
imports nothing from Keras at import time; when Keras is already loaded with
another backend (``python -m keras_stable.demo`` imports the
``keras_stable`` package, hence Keras, before the demo starts), the
command-line entry point restarts the demo in a fresh interpreter with
``KERAS_BACKEND`` set, and :func:`main` called from Python with an explicit
``argv`` returns 2 with a clear error instead. A backend that is not
installed is a one-line error (exit status 2) naming the package to install.
"""

from keras_stable.demo.cli import main

__all__ = ["main"]
