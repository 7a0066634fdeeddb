"""The conformance kit: the properties recurbench's suites rely on, checked on any model class.

Like sktime's ``check_estimator``, one call checks a class against its kind's contract (the docstrings
of :class:`~recurbench.agents.cores.MemoryCore`, :mod:`recurbench.forecasters.models` and
:class:`~recurbench.langs.models.Recognizer`); every built-in passes it in recurbench's own tests, and a
plugin's author calls it in theirs::

    from recurbench.testing import check_core
    def test_my_core_keeps_the_contract():
        check_core(MyCore)

Each ``check_*`` takes a registry name (``"lstm"``, a plugin's, ``"module.path:ClassName"``), a class,
or a factory, runs its properties in order on small CPU tensors (a few seconds at most), and returns
the names of the properties that held. The first one that fails raises :class:`ContractError`, one
line: ``check_core(GRUCore): episode_start_resets: row 0 after an episode start differs from a fresh
episode by 0.31``. A name that names no model (an unknown name, or a ``module:Class`` that cannot be
imported) raises :class:`~recurbench.errors.ConfigError` before any property runs.

Properties (the names ``check_*`` returns):

========================  ====  ==========  =====  ==============================================
property                  core  forecaster  langs  what it asserts
========================  ====  ==========  =====  ==============================================
builds                    x     x           x      the factory gives an ``nn.Module`` of the kind
initial_state             x                        a tuple of batch-first tensors, all zeros
shapes                    x     x           x      outputs of the documented shape, finite
state_carries_over        x                        a row's outputs after step 0 change with its input
                                                   at step 0 (the state carries it over)
episode_start_resets      x                        a row whose episode starts behaves as a fresh one
acting_training_predict   x                        step-by-step (acting) = ``forward_sequence``
                                                   (training) = eval-mode, no-grad (prediction),
                                                   with episode starts inside the sequence
no_state_between_calls          x           x      the same input gives the same output after
                                                   another call; train mode = eval mode at dropout 0
causal                                      x      a position never reads a later one (padding)
rows_independent          x     x           x      a row's output does not depend on other rows
finite_gradients          x     x           x      a loss's gradients are finite and reach the input
deterministic             x     x           x      two builds under one seed: same weights, outputs
serialisation             x     x           x      ``state_dict`` saved and loaded into a fresh build
                                                   (another seed) gives the same outputs
orthogonal_parameters     x                        its ``orthogonal_parameters()`` are its own
========================  ====  ==========  =====  ==============================================
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from recurbench.agents.cores import CORES, MemoryCore, State, make_core
from recurbench.config import unknown_name
from recurbench.errors import ConfigError
from recurbench.forecasters.config import ForecasterConfig, RSASpec
from recurbench.forecasters.models import ARCHITECTURES, build_network
from recurbench.langs.models import LANG_MODELS, N_OUTPUTS, VOCAB, LangModelConfig, build_recognizer
from recurbench.memory.models import SHARED_CORE_SETTINGS
from recurbench.plugins import PluginRegistry, call_with_settings, own_parameters

ATOL, RTOL = 1e-5, 1e-4
"""How close two float32 results must be to count as the same (batched and one-row matmuls differ in
their last bits)."""


class ContractError(AssertionError):
    """A class breaks its kind's contract: the first failing property, in one line."""


@dataclass
class _Checks:
    """Runs named properties in order; the first failure becomes one :class:`ContractError` line."""

    subject: str
    passed: list[str] = field(default_factory=list)

    def run(self, properties: Sequence[tuple[str, Callable[[], None]]]) -> list[str]:
        for name, check in properties:
            try:
                check()
            except ContractError as exc:
                raise ContractError(f"{self.subject}: {name}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - anything the class raises is its failure of this property
                text = " ".join(str(exc).split())
                raise ContractError(f"{self.subject}: {name}: raised {type(exc).__name__}: {text}") from exc
            self.passed.append(name)
        return self.passed


def _fail(message: str) -> None:
    raise ContractError(message)


def _same(a: Tensor, b: Tensor, what: str) -> None:
    if a.shape != b.shape:
        _fail(f"{what}: shape {tuple(a.shape)} against {tuple(b.shape)}")
    if not torch.allclose(a, b, atol=ATOL, rtol=RTOL):
        _fail(f"{what} differ by {float((a - b).abs().max()):.3g}")


def _finite_gradients(module: nn.Module, inputs: Sequence[Tensor]) -> None:
    grads = {n: p.grad for n, p in module.named_parameters() if p.requires_grad}
    bad = [n for n, g in grads.items() if g is not None and not torch.isfinite(g).all()]
    if bad:
        _fail(f"non-finite gradient of {bad[0]}")
    if grads and not any(g is not None and bool(g.abs().sum() > 0) for g in grads.values()):
        _fail("no parameter gets a non-zero gradient")
    for i, x in enumerate(inputs):
        if x.grad is None or not torch.isfinite(x.grad).all() or not bool(x.grad.abs().sum() > 0):
            _fail(f"the gradient does not reach input {i} finite and non-zero")


def _known(registry: PluginRegistry[Any], name: str) -> None:
    """Refuse a name ``registry`` does not know with a :class:`~recurbench.errors.ConfigError`, before any
    property runs (a ``module:Class`` that cannot be imported raises its own)."""
    if name not in registry:
        raise ConfigError(unknown_name(registry.kind, name, registry))


class _Kit:
    """What every kit shares: seeded builds, the standard input's outputs (:meth:`outputs`, by the
    subclass), and the properties that only need those: ``builds``, ``deterministic``, ``serialisation``."""

    kind: type[nn.Module] = nn.Module

    def __init__(self, factory: Callable[[], nn.Module], seed: int) -> None:
        self.factory, self.seed = factory, seed
        self.module: Any = None

    def build(self) -> Any:
        torch.manual_seed(self.seed)
        return self.factory()

    def outputs(self, module: Any) -> Tensor:
        """``module``'s outputs on the kit's standard input."""
        raise NotImplementedError

    def builds(self) -> None:
        module = self.build()
        if not isinstance(module, self.kind):
            _fail(f"built {type(module).__name__}, not a {self.kind.__name__}")
        self.module = module

    def deterministic(self) -> None:
        a, b = self.build().eval(), self.build().eval()
        sa, sb = a.state_dict(), b.state_dict()
        if list(sa) != list(sb):
            _fail("two builds under one seed have different parameter names")
        for key in sa:
            if not torch.equal(sa[key], sb[key]):
                _fail(f"two builds under one seed differ in {key}")
        with torch.no_grad():
            _same(self.outputs(a), self.outputs(b), "the outputs of two builds under one seed")

    def serialisation(self) -> None:
        """``state_dict`` through bytes into a fresh build (seeded otherwise), and ``copy.deepcopy``."""
        module = self.module.eval()
        buffer = io.BytesIO()
        torch.save(module.state_dict(), buffer)
        buffer.seek(0)
        torch.manual_seed(self.seed + 12345)
        fresh = self.factory()
        fresh.load_state_dict(torch.load(buffer, weights_only=True))
        with torch.no_grad():
            want = self.outputs(module)
            _same(self.outputs(fresh.eval()), want, "outputs after a state_dict round trip")
            _same(self.outputs(copy.deepcopy(module)), want, "outputs after copy.deepcopy")
        module.train()


# -- memory cores ------------------------------------------------------------------------------------


def _core_factory(core: str | type | Callable[[], MemoryCore], input_size: int, hidden_size: int,
                  settings: dict[str, Any], agent: bool) -> tuple[str, Callable[[], MemoryCore]]:
    if isinstance(core, str):
        def build_named() -> MemoryCore:
            if not CORES.is_builtin(core):  # a built-in's builder reads the suite's settings it knows
                _refuse_unknown_settings(CORES.own_settings(core), settings, f"memory core {core!r}")
            return make_core(core, input_size, hidden_size, agent=agent, **settings)

        return f"check_core({core!r})", build_named

    if isinstance(core, type):
        def build_class() -> MemoryCore:
            _refuse_unknown_settings(own_parameters(core, 2), settings, core.__name__)
            return call_with_settings(core, input_size, hidden_size, **settings)

        return f"check_core({core.__name__})", build_class
    return f"check_core({getattr(core, '__name__', repr(core))})", core


def _refuse_unknown_settings(own: Mapping[str, Any] | None, settings: dict[str, Any], subject: str) -> None:
    """A key of ``settings`` that is neither one of the core's own settings (``own``; None: it takes
    any) nor a suite's shared core setting (:data:`~recurbench.memory.models.SHARED_CORE_SETTINGS`,
    handed to every core, each reading those it names) fails ``builds``: ``call_with_settings`` would
    drop a misspelt one silently."""
    if own is None:
        return
    unknown = [k for k in settings if k not in own and k not in SHARED_CORE_SETTINGS
               and k not in ("input_size", "hidden_size")]
    if unknown:
        takes = f"its settings: {', '.join(own)}" if own else "it takes none of its own"
        _fail(f"unknown setting {unknown[0]!r} of {subject}; {takes}")


def check_core(core: str | type | Callable[[], MemoryCore], *, input_size: int = 6, hidden_size: int = 8,
               settings: dict[str, Any] | None = None, agent: bool = False, lockstep: bool | None = None,
               seed: int = 0) -> list[str]:
    """Check a memory core against :class:`~recurbench.agents.cores.MemoryCore`'s contract.

    Parameters
    ----------
    core : str, MemoryCore subclass or callable
        A name in :data:`~recurbench.agents.cores.CORES` (built through ``make_core``), a class (built
        as ``cls(input_size, hidden_size, **settings)`` with the settings its ``__init__`` names), or
        a factory of no arguments.
    input_size, hidden_size : int
        The widths it is built with (a factory must use them too).
    settings : dict, optional
        Core settings (``attention_size``, ``nu``, ``rho``, ``memory_window``; any of
        :data:`~recurbench.memory.models.SHARED_CORE_SETTINGS`) and a plugin's own (``{"layers": 2}``);
        default small ones of the former. A key that is neither (a misspelt one), for a class or a
        plugin whose ``__init__`` does not take ``**kwargs``, fails ``builds``.
    agent : bool
        Check the agents' variant (``make_core(..., agent=True)``) of a named core.
    lockstep : bool, optional
        Episodes start in every row at once (a core that cannot drive an agent, such as SAB, whose
        memory grows for the whole batch): the episode starts of the checks fall on the same steps in
        every row. None: a named core's ``not_for_agents``; False for a class.
    seed : int
        The seed of the builds and inputs.

    Returns
    -------
    list of str
        The properties checked (all held); a failing one raises :class:`ContractError`, a name of no
        core :class:`~recurbench.errors.ConfigError`.
    """
    if isinstance(core, str):
        _known(CORES, core)
    settings = {"attention_size": 8, "nu": 2, "rho": 2, "memory_window": 16} if settings is None else settings
    if lockstep is None:
        lockstep = isinstance(core, str) and bool(getattr(CORES[core], "not_for_agents", None))
    subject, factory = _core_factory(core, input_size, hidden_size, settings, agent)
    kit = _CoreKit(factory, input_size, hidden_size, lockstep, seed)
    return _Checks(subject).run([(name, getattr(kit, name)) for name in _CoreKit.PROPERTIES])


class _CoreKit(_Kit):
    """The properties of :func:`check_core`, in order, on one batch of ``B`` rows and ``T`` steps."""

    PROPERTIES = ("builds", "initial_state", "shapes", "state_carries_over", "episode_start_resets",
                  "acting_training_predict", "rows_independent", "finite_gradients", "deterministic",
                  "serialisation", "orthogonal_parameters")
    B, T = 3, 7

    kind = MemoryCore

    def __init__(self, factory: Callable[[], MemoryCore], input_size: int, hidden_size: int, lockstep: bool,
                 seed: int) -> None:
        super().__init__(factory, seed)
        self.input_size, self.hidden_size, self.lockstep = input_size, hidden_size, lockstep
        g = torch.Generator().manual_seed(seed)
        B, T = self.B, self.T
        self.xs = torch.randn(T, B, input_size, generator=g)
        self.starts = torch.zeros(T, B)
        if lockstep:  # every row starts over at t = 0 and t = 4
            self.starts[0] = self.starts[4] = 1.0
        else:  # row 0 at t = 0 and 3; row 1 at t = 0 only; row 2 at t = 0, 1 and 5
            self.starts[0] = 1.0
            self.starts[3, 0] = self.starts[1, 2] = self.starts[5, 2] = 1.0

    @property
    def core(self) -> MemoryCore:
        return self.module

    def outputs(self, module: MemoryCore, xs: Tensor | None = None, starts: Tensor | None = None) -> Tensor:
        xs = self.xs if xs is None else xs
        starts = self.starts if starts is None else starts
        return module.forward_sequence(xs, module.initial_state(xs.shape[1]), starts)[0]

    def builds(self) -> None:
        super().builds()
        if (self.core.input_size, self.core.hidden_size) != (self.input_size, self.hidden_size):
            _fail(f"input_size, hidden_size are {self.core.input_size}, {self.core.hidden_size}; built with "
                  f"{self.input_size}, {self.hidden_size}")

    def initial_state(self) -> None:
        state = self.core.initial_state(self.B, "cpu")
        _check_state(state, self.B, "initial_state")
        nonzero = [i for i, t in enumerate(state) if bool(t.abs().sum() > 0)]
        if nonzero:
            _fail(f"state[{nonzero[0]}] is not all zeros (the rollout buffer pads states with zeros)")

    def shapes(self) -> None:
        B, T, H = self.B, self.T, self.hidden_size
        out, state = self.core.step(self.xs[0], self.core.initial_state(B), self.starts[0])
        if out.shape != (B, H):
            _fail(f"step returned output of shape {tuple(out.shape)}, expected {(B, H)}")
        _check_state(state, B, "step's state")
        outs = self.outputs(self.core)
        if outs.shape != (T, B, H):
            _fail(f"forward_sequence returned {tuple(outs.shape)}, expected {(T, B, H)}")
        if not torch.isfinite(outs).all():
            _fail("forward_sequence returned non-finite outputs")

    def state_carries_over(self) -> None:
        """One episode from step 0 in every row; the input at step 0 changed: each row's outputs at
        steps >= 1 must change too (a ``cell`` that returns the state it was given, or zeros, fails)."""
        module, B = self.core.eval(), self.B
        starts = torch.zeros(self.T, B)
        starts[0] = 1.0
        changed = self.xs.clone()
        changed[0] += 1.0
        with torch.no_grad():
            before, after = self.outputs(module, self.xs, starts), self.outputs(module, changed, starts)
        for row in range(B):
            if torch.allclose(after[1:, row], before[1:, row], atol=ATOL, rtol=RTOL):
                _fail(f"row {row}'s outputs at steps >= 1 do not change when its input at step 0 does "
                      "(the state carries nothing over)")
        module.train()

    def episode_start_resets(self) -> None:
        module, B, xs = self.core.eval(), self.B, self.xs
        restart = torch.ones(B) if self.lockstep else torch.tensor([1.0] + [0.0] * (B - 1))
        with torch.no_grad():
            state = module.initial_state(B)
            for t in range(4):  # advance every row, no reset after t = 0
                _, state = module.step(xs[t], state, torch.ones(B) if t == 0 else torch.zeros(B))
            out, _ = module.step(xs[4], state, restart)
            fresh, _ = module.step(xs[4], module.initial_state(B), torch.ones(B))
            kept, _ = module.step(xs[4], state, torch.zeros(B))
        rows = restart.bool()
        _same(out[rows], fresh[rows], "rows after an episode start and a fresh episode's first step")
        if not self.lockstep:
            _same(out[~rows], kept[~rows], "rows without an episode start, with and without another row's start,")
        module.train()

    def acting_training_predict(self) -> None:
        module, xs, starts = self.core.train(), self.xs, self.starts
        acting = _step_through(module, xs, starts)
        _same(self.outputs(module), acting, "forward_sequence (training) and step-by-step (acting) outputs")
        with torch.no_grad():
            predicting = _step_through(module.eval(), xs, starts)
        _same(predicting, acting, "eval-mode no-grad (prediction) and acting outputs")
        module.train()
        half = 4  # a replay from a stored mid-sequence state, as training chunks do
        first, state = module.forward_sequence(xs[:half], module.initial_state(self.B), starts[:half])
        second, _ = module.forward_sequence(xs[half:], state, starts[half:])
        _same(torch.cat([first, second]), acting, "a replay in two chunks and acting outputs")

    def rows_independent(self) -> None:
        module = self.core.eval()
        changed = self.xs.clone()
        changed[:, 0] += 1.0
        with torch.no_grad():
            alone = self.outputs(module, self.xs[:, 1:2], self.starts[:, 1:2])
            together = self.outputs(module, changed)
        _same(together[:, 1:2], alone, "row 1 in a batch (another row changed) and alone")
        module.train()

    def finite_gradients(self) -> None:
        module = self.core.train()
        module.zero_grad()
        x = self.xs.clone().requires_grad_(True)
        self.outputs(module, x).square().mean().backward()
        _finite_gradients(module, [x])

    def orthogonal_parameters(self) -> None:
        listed = list(getattr(self.core, "orthogonal_parameters", lambda: [])())
        own = {id(p) for p in self.core.parameters()}
        if any(id(p) not in own for p in listed):
            _fail("returns a tensor that is not one of the core's parameters")
        if len({id(p) for p in listed}) != len(listed):
            _fail("lists a parameter twice")


def _check_state(state: State, batch: int, what: str) -> None:
    if not isinstance(state, tuple) or not state or not all(isinstance(t, Tensor) for t in state):
        _fail(f"{what} is not a non-empty tuple of tensors")
    wrong = [i for i, t in enumerate(state) if t.dim() < 1 or t.shape[0] != batch]
    if wrong:
        _fail(f"{what}[{wrong[0]}] has shape {tuple(state[wrong[0]].shape)}, not the batch ({batch}) first")


def _step_through(module: MemoryCore, xs: Tensor, starts: Tensor) -> Tensor:
    state = module.initial_state(xs.shape[1])
    outs = []
    for t in range(xs.shape[0]):
        out, state = module.step(xs[t], state, starts[t])
        outs.append(out)
    return torch.stack(outs)


# -- forecasters -------------------------------------------------------------------------------------

FORECASTER_CONFIG = ForecasterConfig(
    n_features=3, n_marks=2, seq_len=16, label_len=8, pred_len=6, d_model=16, n_heads=4,
    e_layers=1, d_layers=1, d_ff=16, dropout=0.0, segment_len=6,
)
"""The small window and network :func:`check_forecaster` builds with (dropout 0, so train mode and eval
mode must agree)."""

FORECASTER_RSA = RSASpec(k=(1, 1, 1, 1, 0, 0), dilations=(2,))
"""REM heads for an RSA model (four heads: regular, cos, sin, dilated regular)."""


def _forecaster_factory(model: str | type | Callable[..., nn.Module], cfg: ForecasterConfig,
                        settings: dict[str, Any]) -> tuple[str, Callable[[], nn.Module]]:
    if isinstance(model, str):
        cfg = cfg.with_(rsa=FORECASTER_RSA) if ARCHITECTURES[model].rsa and cfg.rsa is None else cfg
        return f"check_forecaster({model!r})", lambda: build_network(model, cfg, **settings)
    return f"check_forecaster({getattr(model, '__name__', repr(model))})", lambda: model(cfg, **settings)


def check_forecaster(model: str | type | Callable[..., nn.Module], *, cfg: ForecasterConfig | None = None,
                     settings: dict[str, Any] | None = None, seed: int = 0) -> list[str]:
    """Check a forecaster network against the contract in :mod:`recurbench.forecasters.models`.

    Parameters
    ----------
    model : str, nn.Module subclass or callable
        A name in :data:`~recurbench.forecasters.models.ARCHITECTURES` (an RSA model gets
        :data:`FORECASTER_RSA`), or a class / callable built as ``model(cfg)``.
    cfg : ForecasterConfig, optional
        The window and sizes (default :data:`FORECASTER_CONFIG`); keep ``dropout`` 0.
    settings : dict, optional
        A plugin's own settings (keyword parameters after ``cfg``), built as ``model(cfg, **settings)``.
    seed : int
        The seed of the builds, inputs and each forward (ProbSparse samples keys).

    Returns
    -------
    list of str
        The properties checked; a failing one raises :class:`ContractError`, a name of no forecaster
        :class:`~recurbench.errors.ConfigError`.
    """
    if isinstance(model, str):
        _known(ARCHITECTURES, model)
    cfg = cfg or FORECASTER_CONFIG
    subject, factory = _forecaster_factory(model, cfg, settings or {})
    kit = _ForecasterKit(factory, cfg, seed)
    return _Checks(subject).run([(name, getattr(kit, name)) for name in _ForecasterKit.PROPERTIES])


class _ForecasterKit(_Kit):
    """The properties of :func:`check_forecaster` on one batch of ``B`` windows (and another batch,
    drawn with another seed, for :meth:`no_state_between_calls`)."""

    PROPERTIES = ("builds", "shapes", "no_state_between_calls", "rows_independent", "finite_gradients",
                  "deterministic", "serialisation")
    B = 3

    def __init__(self, factory: Callable[[], nn.Module], cfg: ForecasterConfig, seed: int) -> None:
        super().__init__(factory, seed)
        g = torch.Generator().manual_seed(seed)
        self.shape = (self.B, cfg.pred_len, cfg.n_features)
        self.x = torch.randn(self.B, cfg.seq_len, cfg.n_features, generator=g)
        self.x_mark = torch.rand(self.B, cfg.seq_len, cfg.n_marks, generator=g) - 0.5
        self.y_mark = torch.rand(self.B, cfg.label_len + cfg.pred_len, cfg.n_marks, generator=g) - 0.5
        g = torch.Generator().manual_seed(seed + 1)
        self.other = (torch.randn(self.x.shape, generator=g), torch.rand(self.x_mark.shape, generator=g) - 0.5,
                      torch.rand(self.y_mark.shape, generator=g) - 0.5)
        if torch.allclose(self.other[0], self.x) or torch.allclose(self.other[1], self.x_mark):
            raise RuntimeError("the kit's two windows coincide: no_state_between_calls would check nothing")

    def outputs(self, module: nn.Module, *inputs: Tensor) -> Tensor:
        torch.manual_seed(self.seed)  # ProbSparse samples its keys: one draw per call
        return module(*(inputs or (self.x, self.x_mark, self.y_mark)))

    def shapes(self) -> None:
        with torch.no_grad():
            out = self.outputs(self.module.eval())
        if out.shape != self.shape:
            _fail(f"forward returned {tuple(out.shape)}, expected [B, pred_len, C] = {self.shape}")
        if out.dtype != self.x.dtype or out.device != self.x.device:
            _fail(f"forward returned {out.dtype} on {out.device}, the input is {self.x.dtype} on {self.x.device}")
        if not torch.isfinite(out).all():
            _fail("forward returned non-finite values")

    def no_state_between_calls(self) -> None:
        """The window's forecast, another window's (another seed's draw: a forecaster that keeps the
        previous call's window, or its mean, forecasts this one differently then), the window's again."""
        module = self.module
        with torch.no_grad():
            first = self.outputs(module.eval())
            self.outputs(module, *self.other)  # another window in between
            again = self.outputs(module)
            training = self.outputs(module.train())
        _same(again, first, "a window's forecast before and after another window's")
        _same(training, first, "train-mode (dropout 0) and eval-mode forecasts")

    def rows_independent(self) -> None:
        module = self.module.eval()
        changed = self.x.clone()
        changed[0] += 1.0
        with torch.no_grad():
            together = self.outputs(module, changed, self.x_mark, self.y_mark)
            alone = self.outputs(module, self.x[1:2], self.x_mark[1:2], self.y_mark[1:2])
        _same(together[1:2], alone, "row 1 in a batch (another row changed) and alone")

    def finite_gradients(self) -> None:
        module = self.module.train()
        module.zero_grad()
        x = self.x.clone().requires_grad_(True)
        self.outputs(module, x, self.x_mark, self.y_mark).square().mean().backward()
        _finite_gradients(module, [x])


# -- language models ---------------------------------------------------------------------------------

LANG_CONFIG = LangModelConfig(d_model=10, n_heads=5, n_layers=2, d_ff=20, dropout=0.0)
"""The small network :func:`check_language_model` builds with (an RSA model gets its Table 2 heads)."""


def _language_factory(model: str | type | Callable[..., nn.Module], cfg: LangModelConfig,
                      settings: dict[str, Any]) -> tuple[str, Callable[[], nn.Module]]:
    if isinstance(model, str):
        from recurbench.langs.models import PAPER_HEADS  # noqa: PLC0415 - beside LANG_MODELS above

        if LANG_MODELS[model].rsa and cfg.rem_k is None:
            cfg = LangModelConfig(**{**cfg.__dict__, "rem_k": PAPER_HEADS.get(model, (cfg.n_heads, 0, 0, 0, 0, 0))})
        return f"check_language_model({model!r})", lambda: build_recognizer(model, cfg, **settings)
    return f"check_language_model({getattr(model, '__name__', repr(model))})", lambda: model(cfg, **settings)


def check_language_model(model: str | type | Callable[..., nn.Module], *, cfg: LangModelConfig | None = None,
                         settings: dict[str, Any] | None = None, seed: int = 0) -> list[str]:
    """Check a language model against :class:`~recurbench.langs.models.Recognizer`'s contract.

    Parameters
    ----------
    model : str, nn.Module subclass or callable
        A name in :data:`~recurbench.langs.models.LANG_MODELS`, or a class / callable built as
        ``model(cfg)``.
    cfg : LangModelConfig, optional
        Sizes (default :data:`LANG_CONFIG`); keep ``dropout`` 0.
    settings : dict, optional
        A plugin's own settings (keyword parameters after ``cfg``), built as ``model(cfg, **settings)``.
    seed : int
        The seed of the builds and inputs.

    Returns
    -------
    list of str
        The properties checked; a failing one raises :class:`ContractError`, a name of no language
        model :class:`~recurbench.errors.ConfigError`.
    """
    if isinstance(model, str):
        _known(LANG_MODELS, model)
    cfg = cfg or LANG_CONFIG
    subject, factory = _language_factory(model, cfg, settings or {})
    kit = _LanguageKit(factory, seed)
    return _Checks(subject).run([(name, getattr(kit, name)) for name in _LanguageKit.PROPERTIES])


class _LanguageKit(_Kit):
    """The properties of :func:`check_language_model` on ``B`` strings of ``T`` symbols (row 1 padded)."""

    PROPERTIES = ("builds", "shapes", "no_state_between_calls", "causal", "rows_independent", "finite_gradients",
                  "deterministic", "serialisation")
    B, T = 3, 9

    def __init__(self, factory: Callable[[], nn.Module], seed: int) -> None:
        super().__init__(factory, seed)
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, VOCAB, (self.B, self.T), generator=g)
        self.ids[1, 6:] = 0  # row 1: a shorter string, padded at the end

    def outputs(self, module: nn.Module, ids: Tensor | None = None) -> Tensor:
        return module(self.ids if ids is None else ids)

    def shapes(self) -> None:
        with torch.no_grad():
            out = self.outputs(self.module.eval())
        want = (self.B, self.T, N_OUTPUTS)
        if out.shape != want:
            _fail(f"forward returned {tuple(out.shape)}, expected [B, T, {N_OUTPUTS}] = {want}")
        if not torch.isfinite(out).all() or bool((out < 0).any() or (out > 1).any()):
            _fail("forward returned values outside [0, 1] (two sigmoid units per position)")

    def no_state_between_calls(self) -> None:
        module = self.module
        with torch.no_grad():
            first = self.outputs(module.eval())
            self.outputs(module, torch.flip(self.ids, [1]).clamp(min=1))
            again = self.outputs(module)
            training = self.outputs(module.train())
        _same(again, first, "a string's outputs before and after another call")
        _same(training, first, "train-mode (dropout 0) and eval-mode outputs")

    def causal(self) -> None:
        module = self.module.eval()
        changed = self.ids.clone()
        changed[:, 5:] = 3 - changed[:, 5:].clamp(min=1)  # the other symbol from position 5 on
        with torch.no_grad():
            a, b = self.outputs(module), self.outputs(module, changed)
            short = self.outputs(module, self.ids[1:2, :6])
        _same(b[:, :5], a[:, :5], "outputs at positions < 5 when positions >= 5 change")
        _same(a[1:2, :6], short, "a padded string's outputs and the same string unpadded")

    def rows_independent(self) -> None:
        module = self.module.eval()
        changed = self.ids.clone()
        changed[0] = 3 - changed[0]
        with torch.no_grad():
            _same(self.outputs(module, changed)[1:2], self.outputs(module, self.ids[1:2]),
                  "row 1 in a batch (another row changed) and alone")

    def finite_gradients(self) -> None:
        module = self.module.train()
        module.zero_grad()
        out = self.outputs(module)
        nn.functional.binary_cross_entropy(out, torch.full_like(out, 0.5)).backward()
        _finite_gradients(module, [])


# -- one entry point ---------------------------------------------------------------------------------

CHECKS: dict[str, Callable[..., list[str]]] = {
    "memory core": check_core,
    "forecaster": check_forecaster,
    "language model": check_language_model,
}
"""The kit of each kind of model (the kinds of :data:`recurbench.plugins.GROUPS` but suites)."""

REGISTRIES: dict[str, Any] = {"memory core": CORES, "forecaster": ARCHITECTURES, "language model": LANG_MODELS}


def check_plugin(name: str, **options: Any) -> dict[str, list[str]]:
    """Run the kit of every kind that has a model ``name`` (a plugin's entry-point name, a built-in, or
    ``module.path:ClassName`` tried against each kind): ``{kind: properties checked}``. A name of no
    kind raises :class:`ContractError`; ``options`` go to each ``check_*``."""
    results = {}
    for kind, registry in REGISTRIES.items():
        try:
            known = name in registry
        except Exception:  # noqa: BLE001 - a module:Class of another kind is simply not this kind
            known = False
        if known:
            results[kind] = CHECKS[kind](name, **options)
    if not results:
        raise ContractError(f"check_plugin({name!r}): no memory core, forecaster or language model of that name")
    return results
