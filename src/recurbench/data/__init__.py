"""Datasets: the registry (checksums, fetch, locate) and Informer's LTSF protocol."""

from recurbench.data.protocol import (
    LTSFData,
    Series,
    Split,
    StandardScaler,
    WindowDataset,
    WindowSpec,
    prepare,
    read_series,
    split_borders,
    time_features,
)
from recurbench.data.registry import DATASETS, DatasetSpec, fetch, get_spec, locate, search_dirs, verify

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "LTSFData",
    "Series",
    "Split",
    "StandardScaler",
    "WindowDataset",
    "WindowSpec",
    "fetch",
    "get_spec",
    "locate",
    "prepare",
    "read_series",
    "search_dirs",
    "split_borders",
    "time_features",
    "verify",
]
