"""Pure maths of membership inference: attack scores from model outputs, and their metrics.

No models and no state: every function maps arrays of per-example outputs (NumPy arrays
or torch tensors) to NumPy arrays or floats. A *membership score* is oriented so that a
higher score means "more likely a member"; every metric below reads it that way and calls
an example a member when its score is at or above a threshold.

Scores:

- :func:`loss_scores`: the loss-threshold attack (Yeom et al. 2018), minus the
  cross-entropy. The floor every membership report starts from.
- :func:`rmia_scores`: RMIA offline (Zarifzadeh et al., ICML 2024).
- :func:`lira_offline_scores`: LiRA offline (Carlini et al., S&P 2022).

Metrics, after Carlini et al. 2022 (report TPR at low FPR, not only AUC):

- :func:`roc`, :func:`auc`, :func:`tpr_at_fpr`, :func:`auc_pvalue`;
- :func:`empirical_epsilon` and :func:`split_threshold_epsilon`: the epsilon lower bound
  a threshold test on the scores implies (the Clopper-Pearson audit of
  :mod:`bench.privacy.audit_maths`, with the members as one side and the non-members as the
  other); only the split version is a valid bound to report;
- :func:`membership_metrics`: all of them in one dict.

Modules of their own:

- :mod:`bench.privacy.mia.lowfpr`: the privacy score's statistic, TPR at the lowest FPR the
  non-member count resolves, with a bootstrap standard error and interval that estimate the
  threshold again in every replicate, and an exact p-value against chance;
- :mod:`bench.privacy.mia.references`: reference models in complementary pairs, LiRA online
  and offline with each candidate's OUT models, RMIA with them, and the leave-one-out games
  on the adversary's own models that choose RMIA's ``a`` and the attack that sets the score;
- :mod:`bench.privacy.mia.one_run`: the one-run canary audit of Steinke, Nasr & Jagielski (2023),
  its epsilon lower bound and that bound's ceiling.
"""

from __future__ import annotations

from bench.privacy.mia.metrics import (
    auc,
    auc_pvalue,
    empirical_epsilon,
    epsilon_at_threshold,
    membership_metrics,
    roc,
    split_threshold_epsilon,
    tpr_at_fpr,
)
from bench.privacy.mia.scores import (
    LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS,
    label_probabilities,
    lira_offline_scores,
    logit_scale,
    loss_scores,
    rmia_scores,
    scaled_logit_confidence,
)

__all__ = [
    "LIRA_PER_EXAMPLE_VARIANCE_MIN_MODELS",
    "auc",
    "auc_pvalue",
    "empirical_epsilon",
    "epsilon_at_threshold",
    "label_probabilities",
    "lira_offline_scores",
    "logit_scale",
    "loss_scores",
    "membership_metrics",
    "rmia_scores",
    "roc",
    "scaled_logit_confidence",
    "split_threshold_epsilon",
    "tpr_at_fpr",
]
