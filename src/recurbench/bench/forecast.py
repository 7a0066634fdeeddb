"""``recurbench bench forecast``: seconds per training epoch of a forecaster at the paper's settings.

The settings (window, layers, d_model, batch 32, Adam at lr 1e-4) are read from the ``ltsf``
suite's ``paper`` profile, so the benchmark times exactly what the suite trains. ``max_batches``
times only the first N batches of the epoch and extrapolates linearly to the full epoch (every
batch of an epoch has the same shape, so time per batch is flat); the result says whether it was
extrapolated. One warm-up batch is run and not timed.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

from recurbench.data.protocol import WindowSpec, prepare
from recurbench.devices import describe_device, resolve_device, synchronize
from recurbench.errors import ConfigError
from recurbench.forecasters.config import ForecasterConfig, RSASpec
from recurbench.forecasters.models import ARCHITECTURES, build_network
from recurbench.forecasters.training import count_parameters, forecast_batch
from recurbench.suites.registry import load_profile


def bench_forecast(
    *, model: str = "informer", dataset: str = "ETTh1", horizon: int = 24, max_batches: int | None = None,
    threads: int = 1, data_dir: str | None = None, seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    """Time one training epoch (or ``max_batches`` of it, extrapolated) on ``device`` (see
    :mod:`recurbench.devices`); returns a JSON-able dict."""
    target = resolve_device(device, what="--device")

    if model not in ARCHITECTURES:
        raise ConfigError(f"unknown model {model!r}; known: {', '.join(ARCHITECTURES)}")
    if max_batches is not None and max_batches < 1:
        raise ConfigError(f"--max-batches must be at least 1, got {max_batches}")
    _, paper = load_profile("ltsf", "paper")
    setting = paper.windows.get(dataset, {}).get(horizon)
    if setting is None:
        raise ConfigError(f"no paper settings for {dataset} at horizon {horizon}")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    data = prepare(dataset, WindowSpec(setting.seq_len, setting.label_len, horizon), data_dir)
    ms = paper.model
    rsa = None
    if ARCHITECTURES[model].rsa:
        heads = paper.rem_heads[dataset][horizon][model]
        rsa = RSASpec(k=tuple(heads.k), dilations=tuple(heads.dilations), gate_init=ms.gate_init)  # type: ignore[arg-type]
    cfg = ForecasterConfig(
        n_features=data.n_features, n_marks=len(data.time_feature_names), seq_len=setting.seq_len,
        label_len=setting.label_len, pred_len=horizon, d_model=ms.d_model, n_heads=ms.n_heads,
        e_layers=setting.e_layers, d_layers=setting.d_layers, d_ff=ms.d_ff, dropout=ms.dropout,
        factor=setting.factor, attention=ms.attention, distil=ms.distil, mix=ms.mix, rsa=rsa,
    )
    network = build_network(model, cfg).to(target).train()
    batch_size = paper.training.batch_size
    optimizer = torch.optim.Adam(network.parameters(), lr=paper.training.learning_rate)
    loader = DataLoader(data.train.dataset(), batch_size=batch_size, shuffle=True)
    total_batches = math.ceil(data.train.n_windows / batch_size)
    to_time = total_batches if max_batches is None else min(max_batches, total_batches)

    def step(batch: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        pred, true = forecast_batch(network, batch, horizon)
        torch.nn.functional.mse_loss(pred, true).backward()
        optimizer.step()

    batches = iter(loader)
    step(next(batches))  # warm-up (allocations, first-call overheads), not timed
    synchronize(target)
    timed = 0
    start = time.perf_counter()
    for batch in loader:
        if timed >= to_time:
            break
        step(batch)
        timed += 1
    synchronize(target)
    elapsed = time.perf_counter() - start
    per_batch = elapsed / max(1, timed)
    return {
        "model": model, "dataset": dataset, "horizon": horizon, "seq_len": setting.seq_len,
        "label_len": setting.label_len, "e_layers": setting.e_layers, "d_layers": setting.d_layers,
        "d_model": ms.d_model, "batch_size": batch_size, "threads": threads, "n_params": count_parameters(network),
        "total_batches": total_batches, "timed_batches": timed, "seconds_per_batch": per_batch,
        "seconds_per_epoch": per_batch * total_batches, "extrapolated": timed < total_batches,
        "device": describe_device(target),
    }
