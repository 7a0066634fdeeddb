"""Forecasters: Informer, LogSparse Transformer, Transformer-XL and their RSA variants (sktime API).

``MODELS`` maps each model's name (as used in suites and on the command line) to a short
description; implementations register in :mod:`recurbench.forecasters.registry` when they exist.
"""

MODELS: dict[str, str] = {
    "informer": "Informer (Zhou et al. 2021): ProbSparse attention, distilling, generative decoder",
    "rsa_informer": "Informer with RSA (REMs mixed into every attention through a learned gate)",
    "logsparse": "LogSparse Transformer (Li et al. 2019): causal convolutional, log-sparse attention",
    "rsa_logsparse": "LogSparse Transformer with RSA",
    "xl": "Transformer-XL for forecasting: segment recurrence, relative positions",
    "rsa_xl": "Transformer-XL with RSA",
}
