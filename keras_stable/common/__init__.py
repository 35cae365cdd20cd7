"""What the subpackages of keras_stable share: one home for each concern.

- `keras_stable.common.checks`: argument validation (one axis validator,
  booleans, label smoothing, ignored classes, reductions, masks, shapes,
  margins, temperatures, distance metrics), the reading of integer labels
  (`integer_labels`) and the warning for probabilities passed as logits
  (`warn_if_probabilities`, `exposed_logits`).
- `keras_stable.common.dtypes`: which dtype a computation runs in and
  which dtype it returns.
- `keras_stable.common.reduction`: the reduction of per-example values
  (Keras masks, `sample_weight` and validity masks) shared by every loss
  and metric.
- `keras_stable.common.serialization`: the one registration helper
  (`register`); registered names are an on-disk format.
- `keras_stable.common.keras_internals`: every reading of a private
  attribute of a Keras or torch object, each behind a named function
  (tested against the installed Keras).
- `keras_stable.common.arguments`: constructor arguments declared once
  (`Arg`): the constructor, its checks and `get_config` come from the
  declaration.

These modules are internal to keras_stable (not a user API), but their names
carry no underscore: `ops`, `layers`, `losses` and `metrics` all import them.
Nothing here imports those subpackages.
"""
