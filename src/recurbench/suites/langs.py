"""The ``langs`` suite: the RSA paper's Table 2 -- six regular languages, train short, test long.

``plan`` expands a profile into one run per language x model x seed and checks everything before
anything trains: names (``--languages``, ``--models``), each language's data settings (sizes, length
windows, that the windows hold enough distinct strings) and each RSA model's REM head layout (it must
fill exactly ``model.n_heads`` heads). ``execute`` loads the language's dataset (generated once and
cached, :func:`recurbench.data.langs.load_dataset`; the run is tagged with its ``data_digest``), trains
the recogniser (:func:`recurbench.langs.training.train_recognizer`) and logs, per run:

* per epoch (step = epoch): ``train_loss``, ``bin0_acc``, ``bin1_acc``, ``learning_rate``,
  ``epoch_seconds`` and, for RSA models, ``gate.<layer>`` (sigma(mu));
* at the end: ``bin0_acc``/``bin1_acc`` are the last epoch's (their latest value), ``bin0_acc_best``/
  ``bin1_acc_best`` each bin's best epoch (``bin0_best_epoch``/``bin1_best_epoch``), ``n_params``,
  ``seconds_per_epoch``;
* artifacts ``accuracy_by_length.json`` (per bin: correct and total strings per length after the last
  epoch, with the bin edge), ``epochs.json`` and, for RSA models, ``rem_parameters.json`` (gates and
  fitted REM parameters per layer and head).

The data are generated, not read: ``--data-dir`` plays no part (the cache folder is the profile's
``cache_dir``). ``summary_rows`` gives both accuracies per bin, mean +- std over seeds, beside the paper's Table 2
(``reference/rsa_table2_regular_languages.csv``; the paper does not say whether its figures are the
last epoch's or the best, nor how many repeats it ran).
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Annotated, Any

import torch
from pydantic import BaseModel, Field, NonNegativeInt, PositiveInt, field_validator

from recurbench.config import StrictModel, Unique, known_name
from recurbench.data.langs import LANGUAGES, LangDataSpec, load_dataset
from recurbench.errors import ConfigError
from recurbench.forecasters.training import count_parameters, rsa_state
from recurbench.langs.models import LANG_MODELS, PAPER_HEADS, LangModelConfig, build_recognizer
from recurbench.langs.training import EncodedSplit, LangEpoch, LangTrainConfig, train_recognizer
from recurbench.plugins import planned_settings, plugin_settings_field
from recurbench.records import logged_settings
from recurbench.reference import reference_text
from recurbench.suites.base import (
    ProgressFn,
    RunOutcome,
    RunPlan,
    SuiteDefinition,
    seconds_per_run,
    selected_names,
    selected_seeds,
)
from recurbench.suites.paper_settings import footnote_row, outcomes_caveat
from recurbench.tracking import RunHandle

_Language = known_name(LANGUAGES, "language")
_Model = known_name(LANG_MODELS, "model")

# ------------------------------------------------------------------------------------------ profile


class LanguageData(StrictModel):
    """One language's dataset: sizes and inclusive length windows (RSA paper, App. E.2)."""

    train_size: PositiveInt
    test_size: PositiveInt
    """Strings in bin 0 and in bin 1 each."""
    train_window: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[lo, hi] of train and bin 0."""
    bin1_window: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)]
    """[lo, hi] of bin 1, the longer strings."""


class LangModelSettings(StrictModel):
    """:class:`recurbench.langs.models.LangModelConfig`, less the head counts (``rem_heads``)."""

    d_model: PositiveInt = 20
    n_heads: PositiveInt = 5
    n_layers: PositiveInt = 3
    d_ff: PositiveInt = 40
    dropout: float = Field(0.0, ge=0, lt=1)
    dilation: PositiveInt = 2
    """Factor of every dilated REM head (settings II and IV); the paper gives none."""
    gate_init: float = Field(1.0, allow_inf_nan=False)
    rsa_positional: bool = False
    lstm_layers: PositiveInt = 1


class LangTrainingSettings(StrictModel):
    """:class:`recurbench.langs.training.LangTrainConfig`."""

    epochs: PositiveInt = 25
    batch_size: PositiveInt = 32
    learning_rate: float = Field(0.005, gt=0, allow_inf_nan=False)
    lr_decay: float = Field(0.5, gt=0, le=1)
    lr_step_epochs: PositiveInt = 5
    eval_batch_size: PositiveInt = 64


class LangsProfile(StrictModel):
    languages: Annotated[list[_Language], Unique] = Field(min_length=1)
    models: Annotated[list[_Model], Unique] = Field(min_length=1)
    seeds: PositiveInt
    data: dict[_Language, LanguageData]
    """Per language: sizes and length windows."""
    data_seed: NonNegativeInt = 0
    """Seed of the data generator: every model and seed of a language sees the same strings."""
    cache_dir: str | None = None
    """Where generated datasets are cached (None: ``$XDG_CACHE_HOME/recurbench/langs``); not a setting
    of the results, so not logged."""
    model: LangModelSettings = LangModelSettings()
    rem_heads: dict[_Model, list[NonNegativeInt]] = {name: list(k) for name, k in PAPER_HEADS.items()}
    """RSA model -> head counts k1..k6 (Table 2's settings I-IV by default)."""
    training: LangTrainingSettings = LangTrainingSettings()
    torch_threads: PositiveInt = 1
    """Intra-op threads per run: these networks are far too small to gain from a second thread."""
    plugin_settings: plugin_settings_field(LANG_MODELS) = {}  # type: ignore[valid-type]
    """Plugin language model -> its own settings (keyword parameters of its ``__init__`` after ``cfg``),
    e.g. ``--set plugin_settings.gru.layers=2``; logged as ``plugin_settings.*`` params."""

    @field_validator("rem_heads")
    @classmethod
    def _rsa_models_only(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        plain = [m for m in value if not LANG_MODELS[m].rsa]
        if plain:
            rsa = ", ".join(m for m, arch in LANG_MODELS.items() if arch.rsa)
            raise ValueError(f"{plain[0]!r} has no REM heads; head layouts are for {rsa}")
        return value


# --------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class LangsJob:
    """Everything one run needs, resolved at plan time."""

    model: str
    data: LangDataSpec
    network: LangModelConfig
    training: LangTrainConfig
    cache_dir: str | None = None
    torch_threads: int = 1
    model_settings: dict[str, Any] = field(default_factory=dict, hash=False)
    """A plugin's own settings (``plugin_settings``), passed to its class."""


def _data_spec(profile: LangsProfile, language: str) -> LangDataSpec:
    settings = profile.data.get(language)
    if settings is None:
        known = ", ".join(profile.data) or "none"
        raise ConfigError(f"data.{language}: no data settings for language {language!r} (the profile has: {known})")
    spec = LangDataSpec(language, settings.train_size, settings.test_size, tuple(settings.train_window),  # type: ignore[arg-type]
                        tuple(settings.bin1_window), profile.data_seed)  # type: ignore[arg-type]
    spec.check(where=f"data.{language}")
    return spec


def _job(profile: LangsProfile, spec: LangDataSpec, model: str) -> tuple[LangsJob, dict[str, Any]]:
    """One configuration's run settings and the params it logs (the seed aside)."""
    ms = profile.model
    rem_k = None
    if LANG_MODELS[model].rsa:
        if model not in profile.rem_heads:
            raise ConfigError(f"rem_heads.{model}: no REM head layout for {model}")
        rem_k = tuple(profile.rem_heads[model])
    network = LangModelConfig(
        d_model=ms.d_model, n_heads=ms.n_heads, n_layers=ms.n_layers, d_ff=ms.d_ff, dropout=ms.dropout,
        rem_k=rem_k, dilation=ms.dilation, gate_init=ms.gate_init, rsa_positional=ms.rsa_positional,  # type: ignore[arg-type]
        lstm_layers=ms.lstm_layers,
    )
    try:
        network.check(LANG_MODELS[model].rsa)
    except ConfigError as exc:
        where = f"rem_heads.{model}" if str(exc).startswith("rem_k") else "model"
        raise ConfigError(f"{where}: {exc}") from None
    training = LangTrainConfig(**profile.training.model_dump())
    own = planned_settings(LANG_MODELS, model, profile.plugin_settings)
    job = LangsJob(model, spec, network, training, profile.cache_dir, profile.torch_threads, own)
    params = {
        "language": spec.language, "model": model,
        "data": {k: v for k, v in spec.as_dict().items() if k != "language"},
        "network": {**asdict(network), "rem_k": list(rem_k) if rem_k else "none"},
        "training": asdict(training), "torch_threads": profile.torch_threads,
        **({"plugin_settings": own} if own else {}),
    }
    return job, params


class LangsSuite(SuiteDefinition):
    name = "langs"
    profile_model = LangsProfile
    selection_keys = ("languages", "models")
    default_device = "cpu"  # networks of ~10K parameters: a GPU only adds launch latency
    headline_metrics = ("bin0_acc", "bin1_acc", "bin0_acc_best", "bin1_acc_best", "bin0_best_epoch",
                        "bin1_best_epoch", "n_params", "seconds_per_epoch")

    def plan(self, profile: BaseModel, selection: Mapping[str, Any], *, data_dir: str | None) -> list[RunPlan]:
        assert isinstance(profile, LangsProfile)
        languages = selected_names(selection, "languages", profile.languages, LANGUAGES, "language")
        models = selected_names(selection, "models", profile.models, LANG_MODELS, "model")
        seeds = selected_seeds(selection, profile.seeds)
        plans: list[RunPlan] = []
        for language in languages:
            spec = _data_spec(profile, language)
            for model in models:
                job, params = _job(profile, spec, model)
                for seed in seeds:
                    plans.append(RunPlan(f"{model}-{language}-s{seed}", seed, {"language": language, "model": model},
                                         params, payload=job))
        return plans

    def shipped_settings(self, profile: BaseModel) -> list[tuple[dict[str, str], dict[str, str | None]]]:
        """Every language with data settings x every model (RSA models where the profile has their heads)."""

        assert isinstance(profile, LangsProfile)
        out: list[tuple[dict[str, str], dict[str, str | None]]] = []
        for language in profile.data:
            try:
                spec = _data_spec(profile, language)
            except ConfigError:
                continue  # settings plan() refuses: no run can have them
            for model, arch in LANG_MODELS.items():
                if arch.rsa and model not in profile.rem_heads:
                    continue
                try:
                    _, params = _job(profile, spec, model)
                except ConfigError:
                    continue
                out.append(({"language": language, "model": model},
                            logged_settings(params)))
        return out

    def setting_defaults(self) -> dict[str, str]:
        """The network's and training's dataclass defaults, as the runs log them."""

        defaults = {"network": {f.name: f.default for f in fields(LangModelConfig) if f.name != "rem_k"},
                    "training": {f.name: f.default for f in fields(LangTrainConfig)}}
        return logged_settings(defaults)

    # ------------------------------------------------------------------------------------------ run

    def execute(
        self, plan: RunPlan, run: RunHandle, progress: ProgressFn, *, data_dir: str | None, device: torch.device
    ) -> dict[str, float]:
        job: LangsJob = plan.payload
        torch.set_num_threads(job.torch_threads)
        progress(0, job.training.epochs, "generating or reading the data")
        data = load_dataset(job.data, job.cache_dir)
        run.set_tags({"data_digest": data.digest})
        train = EncodedSplit.of(data.language, data.splits["train"])
        bins = {name: EncodedSplit.of(data.language, data.splits[name]) for name in ("bin0", "bin1")}
        network = build_recognizer(job.model, job.network, **job.model_settings).to(device)
        n_params = count_parameters(network)
        epochs = job.training.epochs
        epoch_done = [0]

        def on_batch(done: int, total: int) -> None:
            progress(epoch_done[0] + done / max(1, total), epochs, f"epoch {epoch_done[0] + 1}/{epochs}")

        def on_epoch(record: LangEpoch) -> None:
            epoch_done[0] = record.epoch
            run.log_metrics({"train_loss": record.train_loss, "bin0_acc": record.accuracy["bin0"],
                             "bin1_acc": record.accuracy["bin1"], "learning_rate": record.learning_rate,
                             "epoch_seconds": record.seconds, **{f"gate.{k}": v for k, v in record.gates.items()}},
                            step=record.epoch)
            progress(record.epoch, epochs, f"epoch {record.epoch}/{epochs}: loss {record.train_loss:.4f}, "
                     f"bin 0 {record.accuracy['bin0']:.3f}, bin 1 {record.accuracy['bin1']:.3f} ({record.seconds:.0f} s)")

        result = train_recognizer(network, train, bins, job.training, seed=plan.seed, on_epoch=on_epoch, on_batch=on_batch)
        (best0, epoch0), (best1, epoch1) = result.best("bin0"), result.best("bin1")
        metrics = {
            "bin0_acc": result.final("bin0"), "bin1_acc": result.final("bin1"),
            "bin0_acc_best": best0, "bin1_acc_best": best1,
            "bin0_best_epoch": float(epoch0), "bin1_best_epoch": float(epoch1),
            "n_params": float(n_params), "seconds_per_epoch": result.seconds_per_epoch,
        }
        # bin0_acc / bin1_acc were logged per epoch: their latest value is the last epoch's already.
        run.log_metrics({k: v for k, v in metrics.items() if k not in ("bin0_acc", "bin1_acc")})
        run.log_dict({**result.by_length, "bin_edge": job.data.train_window[1],
                      "bin1_window": list(job.data.bin1_window)}, "accuracy_by_length.json")
        run.log_dict([asdict(e) for e in result.epochs], "epochs.json")
        gates, rem = rsa_state(network)
        if rem:
            run.log_dict({"gates": gates, "rem_parameters": rem}, "rem_parameters.json")
        progress(epochs, epochs, f"done: bin 0 {metrics['bin0_acc']:.3f}, bin 1 {metrics['bin1_acc']:.3f}")
        return metrics

    # -------------------------------------------------------------------------------------- summary

    def summary_rows(self, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[list[str]]]:
        groups: dict[tuple[str, str], list[RunOutcome]] = {}
        for o in outcomes:
            groups.setdefault((o.plan.tags["language"], o.plan.tags["model"]), []).append(o)
        header = ["language", "model", "seeds", "bin 0 (last)", "bin 1 (last)", "bin 0 (best epoch)",
                  "bin 1 (best epoch)", "paper bin 0", "paper bin 1", "s/run"]
        reference = paper_reference()
        rows = []
        for (language, model), group in groups.items():
            done = [o for o in group if o.status == "FINISHED"]
            paper = reference.get((language, model))

            def cell(key: str, done: list[RunOutcome] = done) -> str:
                return _mean_std([o.metrics[key] for o in done if key in o.metrics])

            rows.append([
                language, model, f"{len(done)}/{len(group)}", cell("bin0_acc"), cell("bin1_acc"),
                cell("bin0_acc_best"), cell("bin1_acc_best"),
                f"{paper['bin0']:.2f}" if paper else "-", f"{paper['bin1']:.2f}" if paper else "-",
                seconds_per_run(done),
            ])
        if any(row[7] != "-" for row in rows) and (caveat := outcomes_caveat(self, outcomes)):
            rows.append(footnote_row(f"paper bin 0/1: {caveat}", header))
        return header, rows


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ± {statistics.stdev(values):.3f}"


@lru_cache(maxsize=1)
def paper_reference() -> dict[tuple[str, str], dict[str, float]]:
    """The RSA paper's Table 2: (language, model) -> {"bin0": acc, "bin1": acc}, in recurbench's names."""
    text = reference_text("rsa_table2_regular_languages.csv")
    languages = {lang.paper_name: name for name, lang in LANGUAGES.items()}
    out = {}
    for row in csv.DictReader(text.splitlines()):
        for model, arch in LANG_MODELS.items():
            if arch.paper_name is not None:
                out[(languages[row["language"]], model)] = {
                    "bin0": float(row[f"{arch.paper_name}_bin0"]), "bin1": float(row[f"{arch.paper_name}_bin1"])
                }
    return out
