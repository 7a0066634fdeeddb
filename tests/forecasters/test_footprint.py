"""The memory a forecaster takes to train, counted on the meta device before it runs: the count is at
least what the same step keeps on a CPU, the closed-form bound that spares it is high, and the ltsf suite refuses,
at plan time and with the culprit named, the runs that could not fit."""

from __future__ import annotations

import pytest
import torch
import yaml

from recurbench.errors import ConfigError
from recurbench.forecasters.config import ForecasterConfig, RSASpec
from recurbench.forecasters.footprint import (
    HEADROOM,
    WEIGHT_COPIES,
    bound_bytes,
    eval_batch,
    kept_bytes,
    over_budget,
)
from recurbench.forecasters.models import ARCHITECTURES, build_network
from recurbench.suites.registry import load_profile
from recurbench.suites.runner import run_suite
from recurbench.tracking import MemoryTracker

SMALL = ForecasterConfig(n_features=3, n_marks=4, seq_len=24, label_len=12, pred_len=8, d_model=16, n_heads=4,
                         e_layers=2, d_layers=1, d_ff=32, dropout=0.0, factor=3)
REMS = RSASpec(k=(1, 0, 0, 1, 1, 1), dilations=(2, 3, 3))


def _config(model: str) -> ForecasterConfig:
    return SMALL.with_(rsa=REMS) if ARCHITECTURES[model].rsa else SMALL


def _kept_on_cpu(model: str, cfg: ForecasterConfig, batch: int) -> int:
    """What one real training forward on the CPU keeps for the backward pass, counted the same way."""
    torch.manual_seed(0)
    network = build_network(model, cfg)
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept[id(tensor)] = tensor.numel() * tensor.element_size()
        return tensor

    inputs = (torch.randn(batch, cfg.seq_len, cfg.n_features), torch.randn(batch, cfg.seq_len, cfg.n_marks),
              torch.randn(batch, cfg.label_len + cfg.pred_len, cfg.n_marks))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        network(*inputs).sum().backward()
    return sum(kept.values())


@pytest.mark.parametrize("model", ["informer", "rsa_informer", "logsparse", "rsa_logsparse", "xl", "rsa_xl"])
def test_the_meta_count_is_what_a_real_step_keeps_and_grows_with_the_batch(model):
    """The meta device runs some operations as PyTorch's reference decompositions, which keep a little
    more than the CPU's kernels (Informer: 1.11-1.17 times; LogSparse and XL: the same bytes): never less."""
    cfg = _config(model)
    kept, weights = kept_bytes(model, cfg, 6, {})
    on_cpu = _kept_on_cpu(model, cfg, 6)
    assert on_cpu <= kept <= 1.2 * on_cpu
    assert weights == 4 * sum(p.numel() for p in build_network(model, cfg).parameters())
    # Per window, a larger batch keeps no more (a part, such as REMs, is shared by the batch): the largest
    # batch that fits, worked out from one batch's count, is never too large.
    assert 1.8 * kept <= kept_bytes(model, cfg, 12, {})[0] <= 2 * kept


def test_the_bound_is_high_for_every_network_of_the_shipped_profiles_that_count_cheaply():
    """Over the ``small`` and ``quick`` profiles (every architecture and window of Table 1's grid at d_model
    64): the closed form is at least twice the count with its headroom, so skipping the count where the
    bound fits never lets a run through that the count would refuse."""
    for profile in ("small", "quick"):
        definition, cfg = load_profile("ltsf", profile)
        for plan in definition.plan(cfg, {"seeds": 1}, data_dir=None):
            job = plan.payload
            kept, _ = kept_bytes(job.model, job.network, 2, {})
            assert bound_bytes(job.network, 2) >= 2 * HEADROOM * kept, plan.name


def test_over_budget_gives_the_need_and_the_largest_batch_that_fits():
    model, cfg = "logsparse", SMALL.with_(seq_len=96, label_len=48, pred_len=48)
    kept, weights = kept_bytes(model, cfg, 16, {})
    need = int(HEADROOM * kept) + WEIGHT_COPIES * weights
    assert over_budget(model, cfg, 16, need) is None
    budget = need // 3
    over = over_budget(model, cfg, 16, budget)
    assert over is not None and over[0] == need
    fits = over[1]
    assert 0 < fits < 16 and over_budget(model, cfg, fits, budget) is None
    assert over_budget(model, cfg, 16, WEIGHT_COPIES * weights) == (need, 0)  # not one window
    # The evaluation batch: the requested one where the bound fits, else as many windows as fit.
    assert eval_batch(model, cfg, 256, bound_bytes(cfg, 256)) == 256
    assert eval_batch(model, cfg, 256, budget) == int(budget // (HEADROOM * kept / 16))


def _profile_file(tmp_path, batch_size: int) -> str:
    path = tmp_path / "ltsf.yaml"
    definition, _ = load_profile("ltsf", "quick")
    shipped = yaml.safe_load(open(definition.suite_path()))  # noqa: SIM115 - read once
    quick = shipped["profiles"]["quick"]
    quick["training"]["batch_size"] = batch_size
    path.write_text(yaml.safe_dump({"suite": "ltsf", "profiles": {"tiny": quick}}))
    return str(path)


def test_the_suite_refuses_every_run_that_cannot_fit_before_anything_is_written(tmp_path, monkeypatch):
    path = _profile_file(tmp_path, 64)
    definition, cfg = load_profile("ltsf", "quick")
    needs = {}
    for plan in definition.plan(cfg, {"models": ["informer", "logsparse"]}, data_dir=None):
        kept, weights = kept_bytes(plan.payload.model, plan.payload.network, 64, {})
        needs[plan.payload.model] = int(HEADROOM * kept) + WEIGHT_COPIES * weights
    # A machine between the two: the smaller step at batch 64 fits, the larger does not (and the bound of
    # neither fits, so both are counted).
    small, large = sorted(needs, key=needs.get)
    have = (needs[small] + needs[large]) // 2
    assert needs[small] < have < needs[large] and bound_bytes(plan.payload.network, 64) > have
    monkeypatch.setenv("RECURBENCH_MEMORY_GIB", str(have / 2**30))
    tracker = MemoryTracker()
    with pytest.raises(ConfigError) as refused:
        run_suite("ltsf", "tiny", tracker, config_path=path, selection={"models": ["informer", "logsparse"]})
    message = str(refused.value)
    assert message.startswith(f"{path}: profiles.tiny.training.batch_size: at batch 64, 1 run(s) need more than "
                              f"this machine's {have / 2**30:.1f} GiB of memory to train")
    assert f"\n  - {large} on ETTh1 horizon 24 (windows of 48 + 48 + 24 steps) needs about {needs[large] / 2**30:.1f} GiB; " \
           "a batch of at most " in message
    assert f"- {small} " not in message
    assert message.endswith("Set a smaller batch (--set training.batch_size=N), or leave these runs out "
                            "(--datasets, --horizons, --models).")
    assert tracker.runs == []  # nothing opened
    # The command line's batch is named as the command line's.
    with pytest.raises(ConfigError, match=r"^--set training\.batch_size=64: at batch 64, 1 run\(s\)"):
        run_suite("ltsf", "quick", tracker, overrides=["training.batch_size=64"],
                  selection={"models": [large]}, dry_run=True)
