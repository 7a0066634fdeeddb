"""Layers shared by the forecasters (layout ``[B, T, H, D]``): attention variants, embeddings and
the RSA mixer (:mod:`recurbench.forecasters.layers.rsa`). Import the submodules directly."""
