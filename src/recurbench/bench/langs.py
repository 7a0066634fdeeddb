"""Training and scoring speed of the langs suite's recognisers, at a profile's settings.

For each language and model of the profile (its runs' own settings, as ``recurbench run langs`` plans
them): milliseconds per training batch (forward, masked MSE, backward, Adam step) over the first
``batches`` batches of an epoch (length-sorted batches in a seeded random order, as training draws
them, so they sample the epoch's lengths), seconds to score each test bin, and the run time these
imply: ``epochs x (batches per epoch x ms per batch + scoring both bins)``.

``attention="products"`` times every softmax attention as two matrix products with materialised
weights (up to :data:`~recurbench.forecasters.layers.attention.MATH_MAX_KEYS` keys, whatever the head
width), the CPU routing before narrow heads went through SDPA, so that both routings can be timed in
one sitting; ``"auto"`` is the routing the runs take. Transformer* (XL's relative attention) always
materialises its weights: the routing does not change it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from recurbench.data.langs import load_dataset
from recurbench.errors import ConfigError
from recurbench.forecasters.layers import attention as attention_module
from recurbench.langs.models import build_recognizer
from recurbench.langs.training import EncodedSplit, masked_mse, score
from recurbench.suites.langs import LangsJob
from recurbench.suites.registry import load_profile

ATTENTION_ROUTES = ("auto", "products")


def _check_route(route: str) -> None:
    if route not in ATTENTION_ROUTES:
        raise ConfigError(f"attention route {route!r}: choose one of {', '.join(ATTENTION_ROUTES)}")


@contextmanager
def attention_route(route: str) -> Iterator[None]:
    """Within the block, ``products`` materialises softmax attention's weights for heads of any width."""
    _check_route(route)
    saved = attention_module.MATH_MIN_HEAD_DIM
    if route == "products":
        attention_module.MATH_MIN_HEAD_DIM = 0
    try:
        yield
    finally:
        attention_module.MATH_MIN_HEAD_DIM = saved


def _splits(job: LangsJob) -> dict[str, EncodedSplit]:
    """The job's language as encoded ``train``, ``bin0`` and ``bin1`` splits."""
    data = load_dataset(job.data, job.cache_dir)
    return {name: EncodedSplit.of(data.language, data.splits[name]) for name in ("train", "bin0", "bin1")}


def _time_job(job: LangsJob, splits: dict[str, EncodedSplit], batches: int, seed: int) -> dict[str, Any]:
    train = splits["train"]
    bins = {name: splits[name] for name in ("bin0", "bin1")}
    torch.manual_seed(seed)
    model = build_recognizer(job.model, job.network, **job.model_settings)
    optimizer = torch.optim.Adam(model.parameters(), lr=job.training.learning_rate)
    order = train.batches(job.training.batch_size, np.random.default_rng(seed))
    device = torch.device("cpu")
    times = []
    for index in order[: batches + 1]:
        ids, targets, mask = train.tensors(index, device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        masked_mse(model(ids), targets, mask).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    ms_per_batch = 1000 * statistics.fmean(times[1:] or times)  # the first batch warms the allocator up
    scoring = {}
    for name, split in bins.items():
        start = time.perf_counter()
        score(model, split, job.training.eval_batch_size)
        scoring[name] = time.perf_counter() - start
    epoch_s = len(order) * ms_per_batch / 1000 + sum(scoring.values())
    return {"ms_per_batch": ms_per_batch, "batches_per_epoch": len(order),
            "score_bin0_s": scoring["bin0"], "score_bin1_s": scoring["bin1"],
            "run_s": job.training.epochs * epoch_s}


def bench_langs(
    profile: str = "paper",
    *,
    languages: Sequence[str] = (),
    models: Sequence[str] = (),
    batches: int = 40,
    attention: Sequence[str] = ATTENTION_ROUTES,
    seed: int = 0,
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """One row per language x model x attention route of ``profile`` (``languages`` / ``models``:
    a subset, default all): ``ms_per_batch``, ``batches_per_epoch``, ``score_bin0_s``,
    ``score_bin1_s``, ``run_s`` (the implied run time), ``threads``."""
    if batches < 1:
        raise ConfigError(f"batches: must be at least 1, got {batches}")
    for route in attention:
        _check_route(route)
    definition, chosen = load_profile("langs", profile)
    selection = {"languages": list(languages) or None, "models": list(models) or None, "seeds": 1}
    plans = definition.plan(chosen, selection, data_dir=None)
    rows = []
    encoded: dict[Any, dict[str, EncodedSplit]] = {}  # per language's data settings: read and encoded once
    for plan in plans:
        job: LangsJob = plan.payload
        torch.set_num_threads(job.torch_threads)
        if job.data not in encoded:
            encoded[job.data] = _splits(job)
        for route in attention:
            progress(f"{job.data.language} {job.model} ({route})")
            with attention_route(route):
                timing = _time_job(job, encoded[job.data], batches, seed)
            rows.append({"language": job.data.language, "model": job.model, "attention": route, **timing,
                         "threads": job.torch_threads})
    return rows
