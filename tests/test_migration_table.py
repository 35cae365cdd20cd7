"""Every row of docs/migration.md gives the left side's number.

The page says that each replacement "gives the same value wherever the left
one is finite". This module parses the tables "Losses", "Metrics", "Layers"
and "Functions" of the page (not "Deliberate differences from Keras", whose
rows differ on purpose) and runs each row: small deterministic inputs of
ordinary magnitudes, where the left side is finite and well conditioned; the
left side as the cell writes it (a Keras built-in on the current backend; TF
Addons, which is not installed, transcribed from its source in float64
NumPy; `tf.*`, `jnp.*` and `torch.*` in float64 NumPy, and natively too when
they are the backend; a hand-written formula as written); the right side
exactly as the right cell says. The two must agree to float32 tolerance.

`CHECKS` maps each row's left cell to its checks: a row without a check
fails, and so does a check whose row is gone. A check marked `mismatch`
is a form of the row that does not give the left side's number: a strict
xfail naming the difference (it fails loudly once the page or the library
is fixed). `documented` marks the ones the "Deliberate differences" table
already explains.

The row checks live in the package `tests/migration/`: `losses.py` (the
table "Losses"), `metrics_layers.py` ("Metrics" and "Layers") and
`functions.py` ("Functions"; its log-space rows in `log_space.py`); `page.py` parses the page and holds the
shared comparisons and inputs, `transcriptions.py` the TF Addons and
framework formulas in float64 NumPy. This module keeps `CHECKS` and the
tests.
"""

import pytest

from tests.migration.functions import function_cosine
from tests.migration.functions import function_cosine_loss
from tests.migration.functions import function_divide
from tests.migration.functions import function_entropy
from tests.migration.functions import function_gaussian_kl
from tests.migration.functions import function_gaussian_nll
from tests.migration.functions import function_info_nce
from tests.migration.functions import function_kl_divergence
from tests.migration.functions import function_l2_normalize
from tests.migration.functions import function_log_softmax
from tests.migration.functions import function_logsumexp
from tests.migration.functions import function_masked_elementwise
from tests.migration.functions import function_masked_task_distance
from tests.migration.functions import function_metric_learning
from tests.migration.functions import function_norm
from tests.migration.functions import function_pairwise_distance
from tests.migration.functions import function_poisson_nll
from tests.migration.functions import function_poisson_nll_full
from tests.migration.functions import function_sigmoid_cross_entropy
from tests.migration.functions import function_sigmoid_focal_keras
from tests.migration.functions import function_sigmoid_focal_tfa
from tests.migration.functions import function_softmax
from tests.migration.functions import function_softmax_cross_entropy
from tests.migration.functions import function_softmax_focal
from tests.migration.functions import function_sparse_softmax_cross_entropy
from tests.migration.functions import function_sparsemax
from tests.migration.functions import function_sparsemax_keras_bug
from tests.migration.functions import function_sqrt
from tests.migration.functions import function_std
from tests.migration.log_space import function_log1mexp
from tests.migration.log_space import function_log_ndtr
from tests.migration.log_space import function_logaddexp
from tests.migration.log_space import function_softplus_inverse
from tests.migration.losses import loss_attention_layers
from tests.migration.losses import loss_binary
from tests.migration.losses import loss_binary_focal_balanced_probabilities
from tests.migration.losses import loss_binary_focal_from_logits
from tests.migration.losses import loss_categorical_focal_from_logits
from tests.migration.losses import loss_categorical_focal_probabilities
from tests.migration.losses import loss_categorical_from_logits
from tests.migration.losses import loss_categorical_on_probabilities
from tests.migration.losses import loss_contrastive
from tests.migration.losses import loss_cosine_similarity
from tests.migration.losses import loss_ctc
from tests.migration.losses import loss_ctc_op
from tests.migration.losses import loss_dice
from tests.migration.losses import loss_dot_product_attention
from tests.migration.losses import loss_gaussian_nll
from tests.migration.losses import loss_huber
from tests.migration.losses import loss_info_nce
from tests.migration.losses import loss_kl_divergence
from tests.migration.losses import loss_linear_softmax_head
from tests.migration.losses import loss_mae
from tests.migration.losses import loss_mixture_density
from tests.migration.losses import loss_mse
from tests.migration.losses import loss_poisson_log_link
from tests.migration.losses import loss_poisson_rates
from tests.migration.losses import loss_sample_distance
from tests.migration.losses import loss_siamese_tutorial
from tests.migration.losses import loss_softmax_then_hand_written_ce
from tests.migration.losses import loss_sparse_ignore_class
from tests.migration.losses import loss_task_distance
from tests.migration.losses import loss_task_distance_squared
from tests.migration.losses import loss_terminate_on_nan
from tests.migration.losses import loss_triplet_hard
from tests.migration.losses import loss_triplet_hard_anchor_without_positive
from tests.migration.losses import loss_triplet_semihard
from tests.migration.losses import loss_tversky
from tests.migration.metrics_layers import layer_gaussian_sampling
from tests.migration.metrics_layers import layer_lambda_l2_normalize
from tests.migration.metrics_layers import layer_log_softmax
from tests.migration.metrics_layers import layer_safe_norm
from tests.migration.metrics_layers import layer_softmax
from tests.migration.metrics_layers import layer_unit_normalization
from tests.migration.metrics_layers import metric_binary
from tests.migration.metrics_layers import metric_categorical
from tests.migration.metrics_layers import metric_huber
from tests.migration.metrics_layers import metric_mae
from tests.migration.metrics_layers import metric_mse
from tests.migration.metrics_layers import metric_pearson
from tests.migration.metrics_layers import metric_pearson_batch_axis_several_batches
from tests.migration.metrics_layers import metric_r2
from tests.migration.metrics_layers import metric_r2_adjusted_several_outputs
from tests.migration.metrics_layers import metric_sparse
from tests.migration.metrics_layers import metric_task_distance
from tests.migration.page import SECTIONS
from tests.migration.page import migration_rows

# --- the table -> its checks -----------------------------------------------

CHECKS = {
    "`mean(tf.norm(y_true - y_pred, axis=0)**2)`": [loss_task_distance_squared],
    "`mean(keras.ops.norm(y_true - y_pred, axis=0))`": [loss_task_distance],
    "per-sample `norm(y_true - y_pred, axis=-1)` with NaN labels": [loss_sample_distance],
    "`keras.losses.CategoricalCrossentropy(from_logits=True)`": [loss_categorical_from_logits],
    "softmax output + `-sum(y * log(p))`": [loss_softmax_then_hand_written_ce],
    "`keras.losses.CategoricalCrossentropy()` on probabilities": [
        loss_categorical_on_probabilities
    ],
    "`keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=k)`": [
        loss_sparse_ignore_class
    ],
    "`keras.losses.BinaryCrossentropy(from_logits=True)` / `sigmoid` + hand-written BCE": [
        loss_binary
    ],
    "`keras.losses.MeanSquaredError()` with NaN (missing) labels": [loss_mse],
    "`keras.losses.MeanAbsoluteError()` with NaN (missing) labels": [loss_mae],
    "`keras.losses.Huber(delta)` with NaN (missing) labels": [loss_huber],
    "`exp` output + `keras.losses.Poisson()` (a log link)": [loss_poisson_log_link],
    "rate output (`softplus`, `relu`) + `keras.losses.Poisson()`": [loss_poisson_rates],
    "hand-written `0.5 * (log_var + (y - mean)**2 * exp(-log_var))`": [loss_gaussian_nll],
    "a mixture density network's hand-written `-log(sum(pi * N(y)))`": [loss_mixture_density],
    "`keras.losses.BinaryFocalCrossentropy(from_logits=True, gamma=g)`": [
        loss_binary_focal_from_logits
    ],
    "`keras.losses.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=a)` on probabilities": [
        loss_binary_focal_balanced_probabilities
    ],
    "`keras.losses.CategoricalFocalCrossentropy(from_logits=True)`": [
        loss_categorical_focal_from_logits
    ],
    "`keras.losses.CategoricalFocalCrossentropy()` on probabilities": [
        loss_categorical_focal_probabilities
    ],
    "`keras.losses.KLDivergence()` on a softmax output": [loss_kl_divergence],
    "`keras.losses.CosineSimilarity(axis)`": [loss_cosine_similarity],
    "`tfa.losses.TripletSemiHardLoss(margin, distance_metric)`": [loss_triplet_semihard],
    "`tfa.losses.TripletHardLoss(margin, soft, distance_metric)`, a batch-hard loss on `keras.ops.cdist`": [
        loss_triplet_hard,
        loss_triplet_hard_anchor_without_positive,
    ],
    "`tfa.losses.ContrastiveLoss(margin)`": [loss_contrastive],
    "the keras-io siamese tutorial's `loss(margin)` (label 0 = similar pair)": [
        loss_siamese_tutorial
    ],
    "a hand-written NT-Xent / InfoNCE (`logits - 1e9 * eye`)": [loss_info_nce],
    "`Dense(vocab)` / `ReversibleEmbedding(reverse=True, logit_soft_cap=c)` + `SparseCategoricalCrossentropy(from_logits=True)` over a large vocabulary": [
        loss_linear_softmax_head
    ],
    "`keras.ops.dot_product_attention(q, k, v, bias, mask, scale, is_causal)`": [
        loss_dot_product_attention
    ],
    "`keras.layers.MultiHeadAttention(...)`, `keras.layers.GroupQueryAttention(...)`": [
        loss_attention_layers
    ],
    "`keras.callbacks.TerminateOnNaN()`": [loss_terminate_on_nan],
    "`keras.losses.CTC()`": [loss_ctc],
    "`keras.ops.ctc_loss(target, output, target_length, output_length, mask_index)`": [loss_ctc_op],
    "`keras.losses.Dice(axis)`": [loss_dice],
    "`keras.losses.Tversky(alpha=a, beta=b)` (Keras 3.15.1)": [loss_tversky],
    "`keras.metrics.CategoricalCrossentropy(from_logits=True)`": [metric_categorical],
    "`keras.metrics.SparseCategoricalCrossentropy(from_logits=True)`": [metric_sparse],
    "`keras.metrics.BinaryCrossentropy(from_logits=True)`": [metric_binary],
    "`keras.metrics.MeanSquaredError()` with NaN (missing) labels": [metric_mse],
    "`keras.metrics.MeanAbsoluteError()` with NaN (missing) labels": [metric_mae],
    "a hand-written mean Huber metric with NaN (missing) labels": [metric_huber],
    "a hand-written masked distance (the root of a masked sum of squares)": [metric_task_distance],
    "`keras.metrics.PearsonCorrelation(axis=...)`": [
        metric_pearson,
        metric_pearson_batch_axis_several_batches,
    ],
    "`keras.metrics.R2Score(class_aggregation, num_regressors)`": [
        metric_r2,
        metric_r2_adjusted_several_outputs,
    ],
    "`keras.layers.Softmax()`, `Lambda(lambda s: exp(s) / sum(exp(s)))`": [layer_softmax],
    "`Lambda(lambda s: log(softmax(s)))`": [layer_log_softmax],
    "`Lambda(lambda x: tf.norm(x, axis=-1))`": [layer_safe_norm],
    "`keras.layers.UnitNormalization()`, `Lambda(lambda x: tf.math.l2_normalize(x, axis=-1))`": [
        layer_unit_normalization,
        layer_lambda_l2_normalize,
    ],
    "the keras-io VAE's `Sampling()([z_mean, z_log_var])`": [layer_gaussian_sampling],
    "`tf.norm`, `keras.ops.norm`, `jnp.linalg.norm`, `sqrt(sum(x**2) + eps)`": [function_norm],
    "`tf.sqrt`, `keras.ops.sqrt` of something that can be 0": [function_sqrt],
    "`tf.math.l2_normalize`, `keras.ops.normalize`": [function_l2_normalize],
    "`x·y / (‖x‖‖y‖ + eps)`, `keras.ops` cosine of two vectors": [function_cosine],
    "`keras.losses.cosine_similarity(y_true, y_pred, axis)` — which is **`-cos`**": [
        function_cosine_loss
    ],
    "`x / y` where `y` can be 0": [function_divide],
    "`exp(s) / sum(exp(s))`, `keras.ops.softmax`, `tf.nn.softmax`": [function_softmax],
    "`log(softmax(s))`, `tf.nn.log_softmax`": [function_log_softmax],
    "`-sum(softmax(s) * log_softmax(s))` (the entropy by hand)": [function_entropy],
    "`keras.ops.sparsemax(x, axis)`": [function_sparsemax, function_sparsemax_keras_bug],
    "`log(sum(exp(x)))`, `tf.reduce_logsumexp`, `keras.ops.logsumexp`": [function_logsumexp],
    "`tf.nn.softmax_cross_entropy_with_logits`": [function_softmax_cross_entropy],
    "`tf.nn.sparse_softmax_cross_entropy_with_logits`": [function_sparse_softmax_cross_entropy],
    "`tf.nn.sigmoid_cross_entropy_with_logits`": [function_sigmoid_cross_entropy],
    "`sum(mask * (y_true - y_pred)**2)` with NaN labels": [function_masked_task_distance],
    "`(y_true - y_pred)**2`, `abs(...)`, Huber elementwise on NaN labels": [
        function_masked_elementwise
    ],
    "`tf.nn.log_poisson_loss(targets, log_input)`, `torch.nn.functional.poisson_nll_loss`": [
        function_poisson_nll,
        function_poisson_nll_full,
    ],
    "`0.5 * (log_var + (y - mean)**2 * exp(-log_var))`, `torch.nn.functional.gaussian_nll_loss` (takes a variance)": [
        function_gaussian_nll
    ],
    "`tfa.losses.sigmoid_focal_crossentropy(y_true, y_pred, alpha=0.25, gamma=2.0, from_logits=True)`": [
        function_sigmoid_focal_tfa
    ],
    "`keras.losses.binary_focal_crossentropy(y_true, logits, gamma=g, from_logits=True)`": [
        function_sigmoid_focal_keras
    ],
    "`keras.losses.categorical_focal_crossentropy(from_logits=True)`": [function_softmax_focal],
    "`sum(y * log(y / softmax(s)))`, `keras.losses.kl_divergence`": [function_kl_divergence],
    "the keras-io VAE's KL, `-0.5 * sum(1 + z_log_var - z_mean**2 - exp(z_log_var), axis=1)`": [
        function_gaussian_kl
    ],
    "`keras.ops.cdist(x, y)`, `sqrt(‖x‖² + ‖y‖² - 2 x·y)`, `tfa.losses.metric_learning.pairwise_distance`": [
        function_pairwise_distance
    ],
    "`keras.ops.std(x, axis)`": [function_std],
    "`tfa.losses.triplet_semihard_loss`, `tfa.losses.triplet_hard_loss`, `tfa.losses.contrastive_loss`": [
        function_metric_learning
    ],
    "a hand-written NT-Xent": [function_info_nce],
    "`keras.ops.logaddexp(x1, x2)`, `np.logaddexp`": [function_logaddexp],
    "`tfp.math.log1mexp(x)` (which reads `x` as `-abs(x)`), `log(1 - exp(x))`": [function_log1mexp],
    "`tfp.math.log_ndtr(x)`, `tfp.distributions.Normal(0., 1.).log_cdf(x)`, `log(ndtr(x))`": [
        function_log_ndtr
    ],
    "`tfp.math.softplus_inverse(x)`, `log(exp(x) - 1)`, `log(expm1(x))`": [
        function_softplus_inverse
    ],
}


# --- tests -----------------------------------------------------------------


def test_the_tables_are_parsed():
    rows = migration_rows()
    counts = {section: sum(s == section for s, _ in rows) for section in SECTIONS}
    assert all(counts.values()), f"a table of the page was not found: {counts}"
    lefts = [left for _, left in rows]
    # CHECKS is keyed by the left cell alone.
    assert len(set(lefts)) == len(lefts), "two rows of the page have the same left cell"
    assert "`keras_stable.ops.cosine_similarity` is `+cos`" not in lefts  # Deliberate differences


def test_every_row_has_a_check():
    missing = [row for row in migration_rows() if row[1] not in CHECKS]
    assert not missing, f"rows of docs/migration.md without a check here: {missing}"


def test_no_check_is_stale():
    lefts = {left for _, left in migration_rows()}
    stale = [left for left in CHECKS if left not in lefts]
    assert not stale, f"checks for rows no longer on docs/migration.md: {stale}"


def _params():
    for checks in CHECKS.values():
        for check in checks:
            reason = getattr(check, "mismatch", None)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(check, id=check.__name__, marks=marks)


@pytest.mark.parametrize("check", list(_params()))
def test_row_gives_the_left_number(check):
    check()
