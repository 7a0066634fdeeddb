"""Every Triton kernel compiled ahead of time for the GPUs recurbench targets (``recurbench bench
kernels``, and the CI check ``tests/kernels/test_triton_compile.py``), at the shapes the product uses:
the operator's own cases, each REM attention of the shipped LTSF profiles, the regular-language
models and the memory-attention step at the minigrid and memory suites' sizes (:func:`workloads`).
The compiling and the resource reading are :mod:`recurbench.kernels.compile`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from recurbench.config import read_yaml
from recurbench.forecasters.layers.rsa import REMHeadConfig
from recurbench.forecasters.models.transformer_xl import segment_bounds
from recurbench.kernels.compile import (
    KernelResources,
    MemattnWorkload,
    RemWorkload,
    Workload,
    kernel_resources,
    rem_span,
)
from recurbench.suites.base import suite_file


def head_layout(k: Sequence[int], dilations: Sequence[int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(kinds, dilations) per head from Table 5's counts k1..k6 and the dilated heads' factors."""
    cfg = REMHeadConfig(k=tuple(k), dilations=tuple(dilations), allow_unpaired=True)
    return cfg.head_kinds(), cfg.head_dilations()


def kernel_workloads() -> list[RemWorkload]:
    """The operator's own cases: kinds, dilation modes, masks, non-square, truncation, dtypes, chunk."""
    T, D = 1000, 64
    modes = {"undilated": (1, 1, 1, 1), "dilated 1-24": (1, 2, 3, 24), "dilated 2-24": (2, 3, 24, 5)}
    out = [
        RemWorkload(f"rem {kind} {mode} {'masked' if masked else 'unmasked'}", T, (kind,) * 4, dils, D, masked)
        for kind in ("regular", "cos", "sin") for mode, dils in modes.items() for masked in (True, False)
    ]
    mixed = (("regular", "cos", "sin", "sin"), (1, 2, 3, 24))
    out += [
        RemWorkload("rem non-square, queries 50..259 over 200 keys", rem_span(200, range(50, 260)), *mixed, D, True),
        RemWorkload("rem truncated K=200 masked", T, *mixed, D, True, truncate=200),
        RemWorkload("rem truncated K=200 unmasked", T, *mixed, D, False, truncate=200),
        # fp64, TF32 and the explicit chunk with one mask each, to keep the compile count down.
        RemWorkload("rem fp64 unmasked", T, *mixed, D, False, dtype="float64"),
        RemWorkload("rem fp32 tf32 masked", T, *mixed, D, True, tf32=True),
        RemWorkload("rem chunk_size=64 masked", T, *mixed, D, True, chunk=64),
        RemWorkload("rem short T=12", 12, *mixed, D, True),
    ]
    return out


def ltsf_workloads(profiles: Sequence[str] = ("paper", "quick")) -> list[RemWorkload]:
    """Every REM attention of the RSA forecasters at every cell of the shipped LTSF profiles
    (``suites/ltsf.yaml``: windows, Table 5's head layouts, d_model and heads, batch size)."""
    raw = read_yaml(suite_file("ltsf"))["profiles"]  # the raw YAML: the workloads follow its numbers
    out: list[RemWorkload] = []
    for profile in profiles:
        p = raw[profile]
        D, batch = p["model"]["d_model"] // p["model"]["n_heads"], p["training"]["batch_size"]
        for dataset in p["datasets"]:
            for horizon in p["horizons"][dataset]:
                w = p["windows"][dataset][horizon]
                for model, heads in p["rem_heads"][dataset][horizon].items():
                    if model in p["models"]:
                        layout = head_layout(heads["k"], heads.get("dilations", []))
                        out += [
                            RemWorkload(f"ltsf {profile} {dataset}-{horizon} {model} {where}", T, *layout, D, masked,
                                        batch=batch)
                            for where, T, masked in _ltsf_attentions(model, w["seq_len"], w["label_len"], horizon)
                        ]
    return out


def _ltsf_attentions(model: str, seq_len: int, label_len: int, pred_len: int) -> list[tuple[str, int, bool]]:
    """(where, square span T, masked) of each distinct REM call of one forecaster (``forecasters/models``).

    RSA-Informer: encoder self-attention (unmasked, ``seq_len`` keys; the ProbSparse rows lie among
    them), decoder self-attention (masked, ``label_len + pred_len``), cross-attention (unmasked, the
    decoder's positions ``seq_len - label_len ...`` over the encoder's keys). RSA-LogSparse: its causal
    stack over the input and the horizon. RSA-Transformer-XL: each segment of ``pred_len`` over the
    previous segment as memory (masked); XL mixes REMs into its attention weights unless its mixer is
    given ``impl="triton"``, so only then do these launch the kernels."""
    if model == "rsa_informer":
        cross = rem_span(seq_len, range(seq_len - label_len, seq_len + pred_len))
        return [("encoder", seq_len, False), ("decoder", label_len + pred_len, True), ("cross", cross, False)]
    if model == "rsa_logsparse":
        return [("stack", seq_len + pred_len, True)]
    if model == "rsa_xl":
        spans, memory = [], 0
        for start, end in segment_bounds(seq_len + pred_len, pred_len):
            spans.append(rem_span(memory + end - start, range(memory, memory + end - start)))
            memory = end - start
        return [(f"segment over memory, T={T} (impl=triton)", T, True) for T in dict.fromkeys(spans)]
    raise ValueError(f"no REM attentions known for model {model!r}")


def language_workloads() -> list[RemWorkload]:
    """A regular-language model (RSA paper Sec. 4.2): 5 heads of 4 (embedding 20), masked REMs, strings
    of 2-200 symbols; head settings I-IV of Table 2 (dilation 2 where dilated)."""
    settings = {"I": ([5, 0, 0, 0, 0, 0], []), "II": ([3, 0, 0, 2, 0, 0], [2, 2]),
                "III": ([3, 1, 1, 0, 0, 0], []), "IV": ([3, 0, 0, 0, 1, 1], [2, 2])}
    return [
        RemWorkload(f"languages RSA-{name} T={T}", T, *head_layout(k, dil), 4, True)
        for name, (k, dil) in settings.items() for T in (16, 50, 200)
    ]


def memattn_workloads() -> list[MemattnWorkload]:
    """The memory-attention step at the minigrid suite's sizes (16 environments, attention width 32):
    RelLSTM's 5 + 5 slots and MemLSTM windows of 100 to 2000 steps, hidden sizes 64 and 128."""
    out = []
    for H in (64, 128):
        out.append(MemattnWorkload(f"memattn RelLSTM nu=5 rho=5 H={H}", 10, 5, 32, H))
        out += [MemattnWorkload(f"memattn MemLSTM window={S} H={H}", S, S, 32, H) for S in (100, 500, 1000, 2000)]
    return out


def workloads() -> list[Workload]:
    """Everything :func:`kernel_resources` compiles."""
    return [*kernel_workloads(), *ltsf_workloads(), *language_workloads(), *memattn_workloads()]


def kernel_table(archs: Sequence[int] = (80, 90), progress: Callable[[int, int], None] | None = None
                 ) -> list[KernelResources]:
    """:func:`~recurbench.kernels.compile.kernel_resources` of every workload (:func:`workloads`)."""
    return kernel_resources(archs, workloads(), progress)
