"""The ``ltsf`` suite: the RSA paper's Table 1 (Informer, LogSparse, XL and RSA variants).

``plan`` expands a profile into one run per dataset x horizon x model x seed and checks everything
before anything trains: names, the settings tables (``windows``, ``rem_heads``), the REM head layouts,
that the data exist and that every split has at least one window for the horizon. ``execute``
prepares the data under Informer's protocol (:mod:`recurbench.data.protocol`), builds the network,
trains it with Informer's scheme (:func:`recurbench.forecasters.training.train`) and logs, per run:
the hyperparameters (as params), ``train_loss``/``val_loss``/``learning_rate``/``epoch_seconds``
per epoch (step = epoch), ``test_mse``/``test_mae`` on the scaled test set (every window),
``n_params``, ``seconds_per_epoch``, the REM gates sigma(mu) per attention layer
(``gate.<layer>`` after each epoch, ``final_gate.<layer>`` from the weights tested) and the fitted REM parameters per head (artifact ``rem_parameters.json``).

``summary_rows`` gives MSE/MAE mean +- std over seeds per dataset x horizon x model next to the
paper's figures (``reference/rsa_table1_ltsf.csv``, copied from the paper's Table 1 / Table 4).
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Annotated, Any, Literal

import torch
from pydantic import (
    BaseModel,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from recurbench.config import KeyPathError, StrictModel, Unique, check_unique, known_name
from recurbench.data import DATASETS
from recurbench.data.protocol import LTSFData, WindowSpec, prepare
from recurbench.errors import ConfigError, DataError
from recurbench.forecasters.config import ForecasterConfig, RSASpec
from recurbench.forecasters.footprint import eval_batch, over_budget
from recurbench.forecasters.models import ARCHITECTURES, build_network
from recurbench.forecasters.training import (
    TrainConfig,
    ValCheck,
    count_parameters,
    evaluate,
    forecast_example,
    rsa_state,
    train,
)
from recurbench.plugins import planned_settings, plugin_settings_field
from recurbench.records import flatten, logged_settings, param_value
from recurbench.reference import reference_text
from recurbench.runtime import physical_memory
from recurbench.suites.base import (
    ProgressFn,
    RunOutcome,
    RunPlan,
    SuiteDefinition,
    selected_names,
    selected_seeds,
)
from recurbench.suites.paper_settings import footnote_row, outcomes_caveat
from recurbench.tracking import RunHandle

# ------------------------------------------------------------------------------------------ profile


class WindowSetting(StrictModel):
    """One line of Informer's scripts."""

    seq_len: int = Field(ge=1)
    label_len: int = Field(ge=0)
    e_layers: int = Field(ge=1)
    d_layers: int = Field(ge=1)
    factor: int = Field(5, ge=1)


class REMHeads(StrictModel):
    """One cell of the RSA paper's Table 5."""

    k: list[NonNegativeInt]
    dilations: list[PositiveInt] = []


class ModelSettings(StrictModel):
    d_model: PositiveInt = 512
    n_heads: PositiveInt = 8
    d_ff: PositiveInt = 2048
    dropout: float = Field(0.05, ge=0, lt=1)
    attention: str = "prob"
    distil: bool = False
    mix: bool = False
    conv_kernel: PositiveInt = 3
    local_window: NonNegativeInt = 0
    segment_len: PositiveInt | None = None
    gate_init: float = Field(1.0, allow_inf_nan=False)
    keep_positional: bool = False
    prob_rows: Literal["all", "active"] = "all"
    """RSA-Informer: REM term on every ProbSparse query row or on the active ones only (RSASpec.prob_rows)."""


_Factor = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_Model = known_name(ARCHITECTURES, "model")


class TrainingSettings(StrictModel):
    epochs: PositiveInt = 6
    batch_size: PositiveInt = 32
    learning_rate: float = Field(1e-4, gt=0, allow_inf_nan=False)
    lr_decay: float = Field(0.5, gt=0, le=1)
    lr_hold_epochs: PositiveInt = 2
    """Epochs at the full rate before lr_decay applies (TrainConfig.lr_hold_epochs; 2 = Informer2020)."""
    patience: PositiveInt = 3
    max_train_batches: PositiveInt | None = None
    max_val_batches: PositiveInt | None = None
    rsa_lr_factor: _Factor | dict[_Model, _Factor] = 1.0
    """RSA gates and REM parameters train at learning_rate x this (TrainConfig.rsa_lr_factor): one factor
    for every RSA model, or one per model (``{rsa_informer: 1000, rsa_xl: 1}``; an RSA model left out
    trains at 1). Models without RSA parameters ignore it (and log TrainConfig's defaults)."""
    rsa_gate_lr_factor: float | None = Field(None, gt=0, allow_inf_nan=False)
    """The gates alone at learning_rate x this; null = rsa_lr_factor (TrainConfig.rsa_gate_lr_factor)."""
    val_checks_per_epoch: PositiveInt = 1
    """Validation checks per epoch; patience counts checks (TrainConfig.val_checks_per_epoch; 1 = Informer)."""
    test_stride: PositiveInt = 1
    """Score every n-th test window (TrainConfig.test_stride; 1 = every window, Informer's protocol)."""

    @field_validator("rsa_lr_factor", mode="wrap")
    @classmethod
    def _one_error(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A bad factor is reported once, by the form it was given in (a number or a mapping), not once
        per branch of the union."""
        try:
            return handler(value)
        except ValidationError as exc:
            other_form = "float_type" if isinstance(value, dict) else "dict_type"
            first = next((e for e in exc.errors() if e["type"] != other_form), exc.errors()[0])
            where = ".".join(str(part) for part in first["loc"][1:] if part != "[key]")
            message = first["msg"].removeprefix("Value error, ")
            raise ValueError(f"{where}: {message}" if where else message) from None

    @field_validator("rsa_lr_factor")
    @classmethod
    def _rsa_models_only(cls, value: float | dict[str, float]) -> float | dict[str, float]:
        if isinstance(value, dict):
            plain = [m for m in value if not ARCHITECTURES[m].rsa]
            if plain:
                rsa = ", ".join(m for m, arch in ARCHITECTURES.items() if arch.rsa)
                raise ValueError(f"{plain[0]!r} has no RSA parameters; per-model factors are for {rsa}")
        return value


_Dataset = known_name(DATASETS, "dataset")


class LTSFProfile(StrictModel):
    datasets: Annotated[list[_Dataset], Unique]
    horizons: dict[_Dataset, Annotated[list[int], Unique]]
    """Horizons per dataset."""
    models: Annotated[list[_Model], Unique]
    seeds: PositiveInt
    model: ModelSettings = ModelSettings()
    training: TrainingSettings = TrainingSettings()
    windows: dict[_Dataset, dict[int, WindowSetting]]
    """dataset -> horizon -> Informer's settings."""
    rem_heads: dict[_Dataset, dict[int, dict[_Model, REMHeads]]] = {}
    """dataset -> horizon -> RSA model -> Table 5 head layout."""
    torch_threads: PositiveInt = 1
    """Intra-op threads per run. 1 by default: on a shared 2-core machine, torch's spinning worker
    threads make 2 threads several times slower than 1 as soon as another process competes."""
    plugin_settings: plugin_settings_field(ARCHITECTURES) = {}  # type: ignore[valid-type]
    """Plugin forecaster -> its own settings (keyword parameters of its ``__init__`` after ``cfg``),
    e.g. ``--set plugin_settings.gru.layers=2``; logged as ``plugin_settings.*`` params."""

    @field_validator("rem_heads")
    @classmethod
    def _layouts_fit_the_network(
        cls, value: dict[str, dict[int, dict[str, REMHeads]]], info: ValidationInfo
    ) -> dict[str, dict[int, dict[str, REMHeads]]]:
        """Every head layout must fit ``model.n_heads`` and the RSA layer's rules (RSASpec.first_problem):
        checked as the file loads, so that the error names the file and the layout's key path
        (``profiles.paper.rem_heads.ETTh1.24.rsa_informer.k``), not only the cell a plan reached."""
        model = info.data.get("model")
        if model is None:  # the model settings failed, with their own error
            return value
        for dataset, by_horizon in value.items():
            for horizon, by_model in by_horizon.items():
                for name, heads in by_model.items():
                    spec = RSASpec(k=tuple(heads.k), dilations=tuple(heads.dilations))  # type: ignore[arg-type]
                    if (problem := spec.first_problem(model.n_heads)) is not None:
                        key, message = problem
                        raise KeyPathError((dataset, horizon, name, key), message)
        return value


def _training_for(model: str, shared: TrainConfig, ts: TrainingSettings) -> TrainConfig:
    """``shared`` with ``model``'s RSA learning-rate factors; a model without RSA parameters keeps
    TrainConfig's defaults, so that a baseline's logged settings do not change with them."""
    if not ARCHITECTURES[model].rsa:
        return shared
    factor = ts.rsa_lr_factor if not isinstance(ts.rsa_lr_factor, dict) else ts.rsa_lr_factor.get(model, shared.rsa_lr_factor)
    return replace(shared, rsa_lr_factor=factor, rsa_gate_lr_factor=ts.rsa_gate_lr_factor)


def _field_defaults(cls: type) -> dict[str, Any]:
    """The fields of dataclass ``cls`` that have a plain default, with it."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING and f.name != "rsa"}


# --------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class LTSFJob:
    """Everything one run needs, resolved at plan time."""

    dataset: str
    model: str
    window: WindowSpec
    network: ForecasterConfig
    training: TrainConfig
    torch_threads: int = 1
    model_settings: dict[str, Any] = field(default_factory=dict, hash=False)
    """A plugin's own settings (``plugin_settings``), passed to its class."""


def _selected_horizons(raw: Sequence[Any]) -> list[int]:
    out = []
    for i, value in enumerate(raw):
        try:
            out.append(int(value))
        except (TypeError, ValueError):
            raise ConfigError(f"--horizons.{i}: not an integer: {value!r}") from None
    check_unique(out, "horizon", "--horizons")
    return out


@lru_cache(maxsize=8)
def _prepared(dataset: str, window: WindowSpec, data_dir: str | None) -> LTSFData:
    return prepare(dataset, window, data_dir)


def _check_windows(data: LTSFData, where: str) -> None:
    for split in (data.train, data.val, data.test):
        if split.n_windows < 1:
            raise ConfigError(
                f"{where}: the {split.name} split of {data.name} has {split.rows} rows, too few for "
                f"seq_len {data.window.seq_len} + horizon {data.window.pred_len} "
                f"(needs {data.window.seq_len + data.window.pred_len})"
            )


def _named(exc: Exception, profile: LTSFProfile, dataset: str, horizon: int, model: str | None = None) -> ConfigError:
    """An error about a network or window setting (``attention must be ...``, ``label_len (100) cannot
    exceed ...``) named by the profile key it came from, ``model.attention`` or
    ``windows.ETTh1.24.label_len``; else by the configuration."""
    field = re.match(r"\w*", str(exc)).group()  # type: ignore[union-attr]
    where = (f"model.{field}" if field in ModelSettings.model_fields
             else f"windows.{dataset}.{horizon}.{field}" if field in WindowSetting.model_fields else None)
    context = f"{dataset} horizon {horizon}" + (f" {model}" if model else "")
    return ConfigError(f"{where}: {exc} ({context})" if where else f"{context}: {exc}")


REGISTRY_FILE = "registry"
"""The ``data_file`` param of a run on the registered dataset's own file (its sha256 as the registry pins
it): the file every run logged before the param came was checked against."""


def data_file(data: LTSFData) -> str:
    """Which file a run reads, as its ``data_file`` param: :data:`REGISTRY_FILE`, else the file's sha256
    (a modified copy, a user's CSV). A run on other data is another run: ``--skip-finished`` does not
    take one for the other (it took a run on an altered ETTh1 for the official file's)."""
    if data.registry_sha256 is not None and data.sha256 == data.registry_sha256:
        return REGISTRY_FILE
    return f"sha256:{data.sha256}"


def _job(
    profile: LTSFProfile, dataset: str, horizon: int, model: str, n_features: int, n_marks: int,
    source: str = REGISTRY_FILE,
) -> tuple[LTSFJob, dict[str, Any]]:
    """One configuration's run settings and the params it logs (the seed aside); ``source``: the data
    file's :func:`data_file`."""
    setting = profile.windows[dataset][horizon]
    ms, ts = profile.model, profile.training
    shared = TrainConfig(
        epochs=ts.epochs, batch_size=ts.batch_size, learning_rate=ts.learning_rate, lr_decay=ts.lr_decay,
        lr_hold_epochs=ts.lr_hold_epochs,
        patience=ts.patience, max_train_batches=ts.max_train_batches, max_val_batches=ts.max_val_batches,
        val_checks_per_epoch=ts.val_checks_per_epoch, test_stride=ts.test_stride,
    )
    training = _training_for(model, shared, ts)
    rsa = None
    if ARCHITECTURES[model].rsa:
        heads = profile.rem_heads.get(dataset, {}).get(horizon, {}).get(model)
        if heads is None:
            raise ConfigError(f"rem_heads.{dataset}.{horizon}.{model}: no REM head layout for {model}")
        rsa = RSASpec(
            k=tuple(heads.k), dilations=tuple(heads.dilations),  # type: ignore[arg-type]
            gate_init=ms.gate_init, keep_positional=ms.keep_positional, prob_rows=ms.prob_rows,
        )
    network = ForecasterConfig(
        n_features=n_features, n_marks=n_marks,
        seq_len=setting.seq_len, label_len=setting.label_len, pred_len=horizon,
        d_model=ms.d_model, n_heads=ms.n_heads, e_layers=setting.e_layers,
        d_layers=setting.d_layers, d_ff=ms.d_ff, dropout=ms.dropout, factor=setting.factor,
        attention=ms.attention, distil=ms.distil, mix=ms.mix, conv_kernel=ms.conv_kernel,
        local_window=ms.local_window, segment_len=ms.segment_len, rsa=rsa,
    )
    try:
        network.check()
    except ConfigError as exc:
        raise _named(exc, profile, dataset, horizon, model) from None
    window = WindowSpec(setting.seq_len, setting.label_len, horizon)
    own = planned_settings(ARCHITECTURES, model, profile.plugin_settings)
    job = LTSFJob(dataset, model, window, network, training, profile.torch_threads, own)
    params = {
        "dataset": dataset, "model": model, "horizon": horizon, "data_file": source,
        "network": {k: v for k, v in asdict(network).items() if k != "rsa"},
        "rsa": asdict(rsa) if rsa is not None else "none",
        "training": asdict(training), "torch_threads": profile.torch_threads,
        **({"plugin_settings": own} if own else {}),
    }
    return job, params


_EXECUTE_PARAMS = ("n_params", "train_windows", "val_windows", "test_windows")
"""Params ``execute`` logs beside the plan's: they follow from the data and the network."""
_DERIVED_PARAMS = ("network.n_features", "network.n_marks", *_EXECUTE_PARAMS)
"""Logged params that follow from the data and the network, not from the profile."""

_BEFORE_LOGGED: dict[str, Any] = {"training.lr_hold_epochs": 1}
"""Settings whose default is not what runs logged before the setting existed did: recurbench halved
the learning rate after every epoch until ``lr_hold_epochs`` (default 2, Informer2020's loop) came."""


def _too_big(job: LTSFJob, have: int) -> str | None:
    """What is wrong with a run whose training step could not fit in ``have`` bytes, the machine's memory
    (:mod:`recurbench.forecasters.footprint`): the kernel would kill it, or another process, mid-run."""
    net = job.network
    if (over := over_budget(job.model, net, job.training.batch_size, have, **job.model_settings)) is None:
        return None
    need, fits = over
    return (f"{job.model} on {job.dataset} horizon {job.window.pred_len} (windows of {net.seq_len} + {net.label_len} + "
            f"{net.pred_len} steps) needs about {need / 2**30:.1f} GiB; "
            + (f"a batch of at most {fits} fits" if fits else "not even one window fits"))


def _check_fits(jobs: Sequence[LTSFJob]) -> None:
    """Refuse, at plan time, the runs whose training step could not fit in this machine's memory, all
    of them in one error."""
    if (have := physical_memory()) is None or not jobs:
        return
    if problems := [p for job in jobs if (p := _too_big(job, have)) is not None]:
        listed = "".join(f"\n  - {p}" for p in problems)
        raise ConfigError(
            f"training.batch_size: at batch {jobs[0].training.batch_size}, {len(problems)} run(s) need more than "
            f"this machine's {have / 2**30:.1f} GiB of memory to train (the tensors kept for the backward pass, and "
            f"the weights with Adam's state):{listed}\nSet a smaller batch (--set training.batch_size=N), or leave "
            "these runs out (--datasets, --horizons, --models).")


class LTSFSuite(SuiteDefinition):
    name = "ltsf"
    profile_model = LTSFProfile
    selection_keys = ("datasets", "horizons", "models")
    headline_metrics = ("test_mse", "test_mae", "n_params", "epochs_run", "best_epoch", "seconds_per_epoch")
    execute_params = _EXECUTE_PARAMS
    added_params = MappingProxyType({"data_file": REGISTRY_FILE})

    def plan(self, profile: BaseModel, selection: Mapping[str, Any], *, data_dir: str | None) -> list[RunPlan]:
        assert isinstance(profile, LTSFProfile)
        datasets = selected_names(selection, "datasets", profile.datasets, DATASETS, "dataset")
        models = selected_names(selection, "models", profile.models, ARCHITECTURES, "model")
        seeds = selected_seeds(selection, profile.seeds)
        chosen_horizons = _selected_horizons(selection["horizons"]) if selection.get("horizons") else None
        plans: list[RunPlan] = []
        jobs: list[LTSFJob] = []
        for dataset in datasets:
            horizons = chosen_horizons or profile.horizons.get(dataset)
            if not horizons:
                raise ConfigError(f"horizons.{dataset}: no horizons given for dataset {dataset!r}")
            for i, horizon in enumerate(horizons):
                table = profile.windows.get(dataset, {})
                if horizon not in table:  # --horizons' choice, or the profile's horizons without their windows
                    where = f"--horizons.{i}" if chosen_horizons else f"windows.{dataset}.{horizon}"
                    raise ConfigError(
                        f"{where}: no settings for horizon {horizon} of {dataset} in the profile's windows; "
                        f"known horizons: {', '.join(map(str, sorted(table))) or 'none'}"
                    )
                setting = table[horizon]
                try:
                    window = WindowSpec(setting.seq_len, setting.label_len, horizon)
                except DataError as exc:
                    raise _named(exc, profile, dataset, horizon) from None
                try:
                    data = _prepared(dataset, window, data_dir)
                except DataError as exc:
                    raise ConfigError(f"{dataset} (horizon {horizon}): {exc}") from None
                _check_windows(data, f"{dataset} horizon {horizon}")
                for model in models:
                    job, params = _job(profile, dataset, horizon, model, data.n_features, len(data.time_feature_names),
                                       data_file(data))
                    jobs.append(job)
                    for seed in seeds:
                        plans.append(RunPlan(
                            name=f"{model}-{dataset}-{horizon}-s{seed}", seed=seed,
                            tags={"model": model, "dataset": dataset, "horizon": str(horizon)},
                            params=params, payload=job,
                        ))
        _check_fits(jobs)
        return plans

    def shipped_settings(self, profile: BaseModel) -> list[tuple[dict[str, str], dict[str, str | None]]]:
        """Every dataset x horizon with a ``windows`` entry, x every model (RSA models where the
        profile has their head layout). The params decided by the data and the network rather than the
        profile (:data:`_DERIVED_PARAMS`) are ``None`` (any value)."""

        assert isinstance(profile, LTSFProfile)
        out: list[tuple[dict[str, str], dict[str, str | None]]] = []
        for dataset, table in profile.windows.items():
            for horizon in table:
                for model, arch in ARCHITECTURES.items():
                    if arch.rsa and model not in profile.rem_heads.get(dataset, {}).get(horizon, {}):
                        continue
                    try:
                        _, params = _job(profile, dataset, horizon, model, n_features=1, n_marks=1)
                    except ConfigError:
                        continue  # a configuration plan() refuses: no run can have its settings
                    logged: dict[str, str | None] = logged_settings(params)
                    logged.update(dict.fromkeys(_DERIVED_PARAMS))
                    out.append(({"dataset": dataset, "horizon": str(horizon), "model": model}, logged))
        return out

    def setting_defaults(self) -> dict[str, str]:
        """What a run that did not log a param under ``network.``, ``rsa.`` or ``training.`` used: the
        dataclass default, except where a setting arrived with a default other than the behaviour
        before it (:data:`_BEFORE_LOGGED`)."""

        sections = {"network": ForecasterConfig, "rsa": RSASpec, "training": TrainConfig}
        defaults = flatten({name: _field_defaults(cls) for name, cls in sections.items()})
        return {k: param_value(v) for k, v in {**defaults, **_BEFORE_LOGGED}.items()}

    # ------------------------------------------------------------------------------------------ run

    def execute(
        self, plan: RunPlan, run: RunHandle, progress: ProgressFn, *, data_dir: str | None, device: torch.device
    ) -> dict[str, float]:
        job: LTSFJob = plan.payload
        torch.set_num_threads(job.torch_threads)
        data = _prepared(job.dataset, job.window, data_dir)
        network = build_network(job.model, job.network, **job.model_settings).to(device)
        n_params = count_parameters(network)
        run.set_tags(data.provenance())
        run.log_metrics({"n_params": n_params})
        run.log_params({"n_params": n_params, "train_windows": data.train.n_windows,
                        "val_windows": data.val.n_windows, "test_windows": data.test.n_windows})
        epochs = job.training.epochs

        def on_batch(done: int, total: int) -> None:
            progress(epoch_index[0] + done / max(1, total), epochs, f"epoch {epoch_index[0] + 1}/{epochs}{last_check[0]}")

        epoch_index = [0]
        last_check = [""]  # the latest check within the epoch, kept in the description until the next one

        def on_epoch(record: Any) -> None:
            epoch_index[0] = record.epoch
            last_check[0] = ""
            metrics = {"train_loss": record.train_loss, "learning_rate": record.learning_rate,
                       "epoch_seconds": record.seconds}
            if record.val_loss is not None:
                metrics["val_loss"] = record.val_loss
            gates, _ = rsa_state(network)
            metrics.update({f"gate.{name}": value for name, value in gates.items()})
            run.log_metrics(metrics, step=record.epoch)
            val = "" if record.val_loss is None else f", val {record.val_loss:.4f}"
            progress(record.epoch, epochs,
                     f"epoch {record.epoch}/{epochs}: train {record.train_loss:.4f}{val} ({record.seconds:.0f} s)")

        checks = job.training.val_checks_per_epoch

        def on_check(check: ValCheck) -> None:
            if checks == 1:
                return  # the epoch's val_loss says it all
            run.log_metrics({"val_loss_check": check.val_loss, "progress": check.progress}, step=check.step)
            last_check[0] = f", batch {check.batches}/{check.epoch_batches}: val {check.val_loss:.4f}"
            progress(check.progress, epochs, f"epoch {check.epoch}/{epochs}{last_check[0]}")

        training = job.training
        if (have := physical_memory()) is not None:  # a smaller evaluation batch where 256 long windows would not fit
            training = replace(training, eval_batch_size=eval_batch(
                job.model, job.network, training.eval_batch_size, have // 4, **job.model_settings))
        result = train(network, data.train.dataset(), data.val.dataset(), job.window.pred_len, training,
                       on_epoch=on_epoch, on_batch=on_batch, on_check=on_check)
        test_set = data.test.dataset()
        test = evaluate(network, test_set, job.window.pred_len, batch_size=training.eval_batch_size,
                        stride=training.test_stride)
        gates, rem = rsa_state(network)
        metrics = {
            "test_mse": test["mse"], "test_mae": test["mae"], "n_params": float(n_params),
            "epochs_run": float(len(result.epochs)), "best_epoch": float(result.best_progress or len(result.epochs)),
            "seconds_per_epoch": result.seconds_per_epoch,
        }
        run.log_metrics({**metrics, **{f"final_gate.{k}": v for k, v in gates.items()}})
        if rem:
            run.log_dict({"gates": gates, "rem_parameters": rem}, "rem_parameters.json")
        run.log_dict([asdict(e) for e in result.epochs], "epochs.json")
        # The same test window for every model and seed, so that `recurbench report` can set them side by side.
        example = forecast_example(network, test_set, job.window.pred_len, len(test_set) // 2)
        run.log_dict({**example, "columns": list(data.series.columns)}, "forecasts/example_0.json")
        progress(epochs, epochs, f"done: test MSE {test['mse']:.4f}, MAE {test['mae']:.4f}")
        return metrics

    # -------------------------------------------------------------------------------------- summary

    def summary_rows(self, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[list[str]]]:
        groups: dict[tuple[str, int, str], list[RunOutcome]] = {}
        for o in outcomes:
            job: LTSFJob = o.plan.payload
            groups.setdefault((job.dataset, job.window.pred_len, job.model), []).append(o)
        reference = paper_reference()
        # Runs at other settings than the paper's: its change against the baseline is left out, and a
        # closing row says why its MSE/MAE are not comparable with ours.
        caveat = outcomes_caveat(self, outcomes)
        header = ["dataset", "horizon", "model", "seeds", "MSE", "MAE", "paper MSE", "paper MAE", "s/epoch",
                  "MSE vs baseline" if caveat else "MSE vs baseline (paper)"]
        finished = {key: [o for o in group if o.status == "FINISHED"] for key, group in groups.items()}
        mean_mse = {key: statistics.fmean(o.metrics["test_mse"] for o in done) for key, done in finished.items() if done}
        rows = []
        for (dataset, horizon, model), group in groups.items():
            done = finished[(dataset, horizon, model)]
            paper = reference.get((dataset, horizon, ARCHITECTURES[model].paper_name))
            seeds = f"{len(done)}/{len(group)}"
            rows.append([
                dataset, str(horizon), model, seeds,
                _mean_std([o.metrics["test_mse"] for o in done]),
                _mean_std([o.metrics["test_mae"] for o in done]),
                f"{paper['mse_mean']:.3f} ± {paper['mse_std']:.3f}" if paper else "-",
                f"{paper['mae_mean']:.3f} ± {paper['mae_std']:.3f}" if paper else "-",
                f"{statistics.fmean(o.metrics['seconds_per_epoch'] for o in done):.1f}" if done else "-",
                _versus_baseline(dataset, horizon, model, mean_mse, {} if caveat else reference),
            ])
        if any(row[-1] != "-" for row in rows):
            rows.append(footnote_row(
                "MSE vs baseline: an RSA model's mean test MSE against its baseline's, the same network without "
                "REMs (informer for rsa_informer), in this invocation" + ("" if caveat else "; in brackets, the paper's"),
                header))
        if caveat and any(row[6] != "-" for row in rows):
            rows.append(footnote_row(f"paper MSE/MAE: {caveat}", header))
        return header, rows


def _versus_baseline(
    dataset: str, horizon: int, model: str, mean_mse: Mapping[tuple[str, int, str], float],
    reference: Mapping[tuple[str, int, str], Mapping[str, float]],
) -> str:
    """An RSA row's mean test MSE relative to its baseline's in the same invocation, e.g. ``-14.3 %``,
    with the paper's own change in brackets; ``-`` for a baseline or when the baseline did not run."""
    base = ARCHITECTURES[model].baseline
    if base is None or (dataset, horizon, model) not in mean_mse or (dataset, horizon, base) not in mean_mse:
        return "-"
    ours = 100 * (mean_mse[(dataset, horizon, model)] / mean_mse[(dataset, horizon, base)] - 1)
    paper_rsa = reference.get((dataset, horizon, ARCHITECTURES[model].paper_name))
    paper_base = reference.get((dataset, horizon, ARCHITECTURES[base].paper_name))
    if paper_rsa is None or paper_base is None:
        return f"{ours:+.1f} %"
    return f"{ours:+.1f} % ({100 * (paper_rsa['mse_mean'] / paper_base['mse_mean'] - 1):+.1f} %)"


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.3f}"  # one seed has no spread to show (not "± 0.000")
    return f"{mean:.3f} ± {statistics.stdev(values):.3f}"


@lru_cache(maxsize=1)
def paper_reference() -> dict[tuple[str, int, str], dict[str, float]]:
    """The RSA paper's Table 1 (with Table 4's standard deviations): (dataset, horizon, model) -> figures."""
    text = reference_text("rsa_table1_ltsf.csv")
    out = {}
    for row in csv.DictReader(text.splitlines()):
        out[(row["dataset"], int(row["horizon"]), row["model"])] = {
            k: float(row[k]) for k in ("mse_mean", "mse_std", "mae_mean", "mae_std")
        }
    return out

