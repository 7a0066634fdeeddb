"""The attentive cores' whole-sequence function against the reference step, in float64: outputs and
every parameter's gradient (the input too), for each cell and each kind of memory."""

import pytest
import torch

from recurbench.agents.cores import AttentiveCore, make_core
from recurbench.kernels.memattn.sequence import attentive_sequence

CASES = [
    # core, settings: the relevant set filling, full and evicting; a window kept whole; a sliding window
    ("rellstm", {"nu": 3, "rho": 2}),
    ("rellstm", {"nu": 2, "rho": 6}),
    ("memlstm", {}),
    ("memlstm", {"memory_window": 7}),
    ("relrnn", {"nu": 3, "rho": 2, "nonlinearity": "modrelu"}),
    ("relrnn", {"nu": 4, "rho": 3, "nonlinearity": "tanh"}),
    ("memrnn", {"nonlinearity": "relu"}),
    ("memrnn", {"nonlinearity": "modrelu", "memory_window": 5}),
]


def _reference(core: AttentiveCore, x: torch.Tensor) -> torch.Tensor:
    starts = torch.zeros(x.shape[:2], dtype=x.dtype)
    starts[0] = 1.0
    state = tuple(t.to(x.dtype) for t in core.initial_state(x.shape[1]))
    return core.forward_sequence(x, state, starts)[0]


def _assert_matches_the_reference(core, loop: str = "auto", reference=_reference) -> None:
    """Outputs and the gradients of the input and every parameter, in float64, for 30 steps of 3 rows."""
    x = torch.randn(30, 3, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(30, 3, 8, dtype=torch.float64)  # a loss that weighs every output differently
    expected = reference(core, x)
    got = core.sequence_outputs(x, loop=loop) if loop != "auto" else core.sequence_outputs(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    inputs = [x, *core.parameters()]
    names = ["x", *(n for n, _ in core.named_parameters())]
    want = torch.autograd.grad((expected * weight).sum(), inputs)
    have = torch.autograd.grad((got * weight).sum(), inputs)
    for n, a, b in zip(names, have, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=n)


@pytest.mark.parametrize("loop", ["native", "python"])
@pytest.mark.parametrize(("name", "settings"), CASES)
def test_outputs_and_every_gradient_match_the_reference_step_in_float64(name, settings, loop):
    torch.manual_seed(0)
    settings = {"memory_window": 60, **settings}
    core = make_core(name, 6, 8, attention_size=5, **settings).double()
    assert isinstance(core, AttentiveCore)
    _assert_matches_the_reference(core, loop)


@pytest.mark.parametrize(("name", "settings"), [("rellstm", {"nu": 4, "rho": 4}), ("relrnn", {"nu": 3, "rho": 5}),
                                                ("memlstm", {})])
def test_the_two_loops_agree_in_float32_at_the_training_sizes(name, settings):
    # The C++ loop against the Python one where training runs them: float32, batch 10, width 128,
    # attention 64, a few hundred steps (rounding differs; the screening's choices must not).
    torch.manual_seed(0)
    core = make_core(name, 10, 128, attention_size=64, memory_window=300, **settings)
    x = torch.randn(120, 10, 10)
    weight = torch.randn(120, 10, 128)
    outs, grads = [], []
    for loop in ("native", "python"):
        out = core.sequence_outputs(x, loop=loop)
        outs.append(out)
        grads.append(torch.autograd.grad((out * weight).sum(), list(core.parameters())))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    for n, a, b in zip([n for n, _ in core.named_parameters()], *grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=n)


def test_relevance_screening_keeps_the_states_that_drew_attention():
    # A relevant set must change the outputs: with rho = 0 the same buffer forgets what rho > 0 keeps.
    torch.manual_seed(1)
    core = make_core("rellstm", 6, 8, attention_size=5, nu=2, rho=3).double()
    x = torch.randn(20, 2, 6, dtype=torch.float64)
    forgetful = make_core("rellstm", 6, 8, attention_size=5, nu=2, rho=0).double()
    forgetful.load_state_dict(core.state_dict())
    assert not torch.allclose(core.sequence_outputs(x)[-1], forgetful.sequence_outputs(x)[-1])


def test_bad_arguments_are_refused():
    xw = torch.zeros(4, 2, 8)
    w = torch.zeros(8, 8)
    with pytest.raises(ValueError, match="unknown cell 'gru'"):
        attentive_sequence(xw, w, torch.zeros(3, 8), torch.zeros(3), torch.zeros(3, 8), torch.zeros(3), cell="gru",
                           nu=2, rho=1)
    with pytest.raises(ValueError, match="need nu >= 1"):
        attentive_sequence(xw, w, torch.zeros(3, 8), torch.zeros(3), torch.zeros(3, 8), torch.zeros(3), cell="tanh",
                           nu=0, rho=1)


@pytest.mark.parametrize(("name", "settings"), [("rnn", {"nonlinearity": "modrelu"}), ("rnn", {"nonlinearity": "tanh"}),
                                                ("rnn", {"nonlinearity": "relu"}), ("exprnn", {"nonlinearity": "modrelu"})])
def test_the_rnns_sequence_matches_the_reference_step_in_float64(name, settings):
    torch.manual_seed(0)
    core = make_core(name, 6, 8, **settings).double()
    _assert_matches_the_reference(core)


def test_the_native_loop_is_refused_where_it_cannot_run(monkeypatch):
    from recurbench.kernels.memattn import sequence

    args = (torch.zeros(4, 2, 8), torch.zeros(8, 8), torch.zeros(3, 8), torch.zeros(3), torch.zeros(3, 8), torch.zeros(3))
    with pytest.raises(ValueError, match="unknown loop 'cuda'"):
        attentive_sequence(*args, cell="tanh", nu=2, rho=1, loop="cuda")
    monkeypatch.setattr(sequence, "native_module", lambda: None)  # switched off, or no compiler
    with pytest.raises(RuntimeError, match="RECURBENCH_NATIVE=0, or its build failed"):
        attentive_sequence(*args, cell="tanh", nu=2, rho=1, loop="native")
    assert attentive_sequence(*args, cell="tanh", nu=2, rho=1).shape == (4, 2, 8)  # auto: the Python loop


def test_the_native_loops_saved_history_dies_with_the_graph(monkeypatch):
    import weakref

    from recurbench.kernels.memattn import sequence

    built = sequence.native_module()
    seen = []

    class Spy:
        def attentive_forward(self, *args):
            hist = built.attentive_forward(*args)
            seen.append(weakref.ref(hist[0]))
            return hist

        def attentive_backward(self, *args):
            return built.attentive_backward(*args)

    monkeypatch.setattr(sequence, "native_module", Spy)
    core = make_core("rellstm", 6, 8, attention_size=5, nu=2, rho=2)
    out = core.sequence_outputs(torch.randn(12, 2, 6))
    assert seen and seen[0]() is not None
    out.sum().backward()
    del out
    assert seen[0]() is None


def test_the_saved_history_dies_with_the_graph(monkeypatch):
    # what the forward keeps for the backward lives on the graph's node; nothing must keep it beyond
    import weakref

    from recurbench.kernels.memattn import sequence

    seen = []
    real = sequence._Histories.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append(weakref.ref(self.h))

    core = make_core("rellstm", 6, 8, attention_size=5, nu=2, rho=2)
    x = torch.randn(12, 2, 6)
    monkeypatch.setattr(sequence._Histories, "__init__", spy)
    out = core.sequence_outputs(x, loop="python")
    assert seen and seen[0]() is not None
    out.sum().backward()
    del out
    assert seen[0]() is None  # freed by reference counting alone (no gc.collect())


SAB_CASES = [
    # topk below and above the stored count, truncation inside and beyond the stride, stride 1
    {"topk": 3, "truncate": 4, "memory_stride": 2},
    {"topk": 20, "truncate": 7, "memory_stride": 3},
    {"topk": 2, "truncate": 1, "memory_stride": 1},
]


@pytest.mark.parametrize("settings", SAB_CASES)
def test_sabs_native_sequence_matches_stepping_the_cell_in_float64(settings):
    # SAB's reference is its step (SABCore.cell): truncation, top-k selection and gradients that reach
    # the past only through the selected states must all come out the same in the C++ loop.
    torch.manual_seed(0)
    core = make_core("sab", 6, 8, attention_size=5, **settings).double()
    _assert_matches_the_reference(core, "native", reference=lambda core, x: core.sequence_outputs(x, loop="python"))


def test_sabs_sequence_falls_back_to_stepping_without_the_native_loop(monkeypatch):
    from recurbench.kernels.memattn import sequence

    torch.manual_seed(0)
    core = make_core("sab", 6, 8, attention_size=5, topk=2, truncate=3, memory_stride=2).double()
    x = torch.randn(12, 2, 6, dtype=torch.float64)
    native = core.sequence_outputs(x)
    monkeypatch.setattr(sequence, "native_module", lambda: None)
    torch.testing.assert_close(core.sequence_outputs(x), native, rtol=0, atol=1e-12)
    with pytest.raises(RuntimeError, match="native loop is not available"):
        core.sequence_outputs(x, loop="native")


@pytest.mark.parametrize("lstm", [False, True])
def test_the_python_loops_histories_live_on_the_inputs_device(lstm):
    # The loop that runs off the CPU keeps every history where the inputs are: the screened memory's
    # slot indices (``flat``) were made on the CPU, and on a GPU its first index_select failed
    # ("index is on cpu, different from other tensors on cuda:0"). ``meta`` stands in for the GPU.
    from recurbench.kernels.memattn.sequence import _Histories

    xw = torch.empty(5, 2, 4 * 8 if lstm else 8, device="meta")
    hist = _Histories(xw, 8, 3, 3, lstm, window=False)
    tensors = {name: t for name, t in vars(hist).items() if isinstance(t, torch.Tensor)}
    assert "flat" in tensors and ("c" in tensors) == lstm
    assert {name: t.device.type for name, t in tensors.items()} == dict.fromkeys(tensors, "meta")


def test_a_failed_build_is_warned_with_the_compilers_first_error(monkeypatch):
    """The warning names what broke the build (here, as on torch 2.11's headers: an ambiguous overload),
    not ninja's closing line; cpp_extension's exception carries the build's output after its message."""
    import torch.utils.cpp_extension

    from recurbench.kernels.memattn import native

    output = ("Error building extension 'recurbench_memattn': [1/2] c++ -c sequence_native.cpp -o sequence_native.o\n"
              "FAILED: sequence_native.o\n"
              "sequence_native.cpp:404:24: error: call of overloaded 'sum(<brace-enclosed initializer list>)' is ambiguous\n"
              "  404 |   Tensor d_bq = d_q.sum({0, 1});\n"
              "sequence_native.cpp:585:24: error: call of overloaded 'sum(<brace-enclosed initializer list>)' is ambiguous\n"
              "ninja: build stopped: subcommand failed.\n")

    def failing_load(**_kwargs):
        raise RuntimeError(output)

    monkeypatch.setattr(torch.utils.cpp_extension, "load", failing_load)
    monkeypatch.setenv(native.SWITCH, "1")
    with pytest.warns(RuntimeWarning, match=r"could not be built \(sequence_native\.cpp:404:24: error: call of "
                                            r"overloaded 'sum\(<brace-enclosed initializer list>\)' is ambiguous\)"):
        assert native.native_module.__wrapped__() is None
    assert native.build_failure(RuntimeError("g++: command not found")) == "g++: command not found"
    assert native.build_failure(OSError()) == "OSError"


def test_two_checkouts_build_the_extension_under_names_of_their_own(monkeypatch, tmp_path):
    """PyTorch rebuilds a module whose build command changed (the source's path, the environment's include
    folders are in it): two checkouts sharing one name rebuilt it each time the other was used."""
    import shutil

    from recurbench.kernels.memattn import native

    here = native.build_name()
    assert here == native.build_name() and here.isidentifier()
    copy = tmp_path / "other_checkout" / native.SOURCE.name
    copy.parent.mkdir()
    shutil.copy(native.SOURCE, copy)  # the same version's source, elsewhere
    monkeypatch.setattr(native, "SOURCE", copy)
    elsewhere = native.build_name()
    assert elsewhere != here and elsewhere.rsplit("_", 1)[0] == here.rsplit("_", 1)[0]  # same CPU and source
    monkeypatch.setattr(native.sys, "prefix", str(tmp_path / "another_venv"))
    assert native.build_name() not in (here, elsewhere)
