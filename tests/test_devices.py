"""``--device`` / ``device``: what each spelling resolves to, and the refusals, on any machine (CUDA's
availability is patched, so a CPU-only machine checks the GPU branches and a GPU machine the CPU ones)."""

from __future__ import annotations

import pytest
import torch

from recurbench.devices import describe_device, resolve_device, rng_devices
from recurbench.errors import ConfigError


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_auto_is_the_first_gpu_when_one_is_visible_else_the_cpu(monkeypatch, no_cuda):
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)


@pytest.mark.parametrize(("spec", "expected"), [("cpu", "cpu"), ("CPU", "cpu"), (" cuda", "cuda:0"),
                                                ("cuda:1", "cuda:1"), (torch.device("cuda", 1), "cuda:1")])
def test_spellings(two_gpus, spec, expected):
    assert resolve_device(spec) == torch.device(expected)


def test_an_unknown_name_is_refused_with_the_choices():
    with pytest.raises(ConfigError) as info:
        resolve_device("gpu", what="--device")
    assert str(info.value) == "--device: unknown device 'gpu'; expected auto, cpu, cuda, cuda:N or mps"


def test_a_gpu_index_past_the_last_is_refused(two_gpus):
    with pytest.raises(ConfigError) as info:
        resolve_device("cuda:2", what="--device")
    assert str(info.value) == "--device: 'cuda:2' does not exist: this machine has 2 CUDA device(s), cuda:0..cuda:1"


@pytest.mark.parametrize(("cuda_build", "reason"), [
    (None, "this torch was built without CUDA"),
    ("12.4", "no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES and the driver)"),
])
def test_a_gpu_on_a_machine_without_one_is_refused_with_the_reason(monkeypatch, no_cuda, cuda_build, reason):
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    with pytest.raises(ConfigError) as info:
        resolve_device("cuda", what="InformerForecaster: device")
    assert str(info.value) == (f"InformerForecaster: device: 'cuda' asks for a GPU, but {reason} "
                               f"(torch {torch.__version__}); use 'cpu' or 'auto'")


def test_cpu_is_described_plainly_and_forks_no_cuda_generator():
    assert describe_device(torch.device("cpu")) == "cpu"
    assert rng_devices(torch.device("cpu")) == []
    assert rng_devices(torch.device("cuda", 1)) == [1]
