"""Forecasters: Informer, LogSparse Transformer, Transformer-XL and their RSA variants (sktime API).

The networks are registered in :data:`recurbench.forecasters.models.ARCHITECTURES` (name -> network
class, RSA flag, Table 1 column, description) and the sktime estimators in
:data:`recurbench.forecasters.estimators.ESTIMATORS`, under the same names.
"""
