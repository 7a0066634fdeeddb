"""Memory-task training where the model is: on a CUDA machine, every Table 5 core (and MemLSTM) trains on
the GPU as it does on the CPU, the attentive cores through the Python loop of their whole-sequence
function (the C++ loop is the CPU's). Skipped without a GPU; ``.ci/gpu-check`` runs it."""

from __future__ import annotations

import pytest
import torch

from recurbench.memory.models import SequenceModelConfig
from recurbench.memory.tasks import make_task
from recurbench.memory.training import MemoryTrainConfig, train_memory_task

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# Small, with a screened memory smaller than the sequence (kappa = 3 of 25 steps): the slot indices
# index the histories on the device.
NETWORKS = {
    "lstm": {}, "rnn": {}, "exprnn": {"recurrent_init": "random"},
    "memrnn": {"memory_window": 4}, "memlstm": {"memory_window": 4},
    "relrnn": {"nu": 2, "rho": 1}, "rellstm": {"nu": 2, "rho": 1},
    "sab": {"topk": 2, "truncate": 4, "memory_stride": 2},
}


@cuda
@pytest.mark.parametrize("core", list(NETWORKS))
def test_a_core_trains_on_the_gpu_as_on_the_cpu(core):
    task = make_task("copy", 5, copy_length=2, labels=4)
    network = SequenceModelConfig(core, hidden_size=16, attention_size=8, **NETWORKS[core])
    config = MemoryTrainConfig(updates=4, batch_size=8, log_every=1, eval_batches=1, compile_core=False)
    on_cpu = train_memory_task(task, network, config, seed=0, device="cpu")
    on_gpu = train_memory_task(task, network, config, seed=0, device="cuda")
    # The same start and data; float32 on both (cuDNN's LSTM may take TF32 products: a loose bound).
    assert [p.loss for p in on_gpu.curve] == pytest.approx([p.loss for p in on_cpu.curve], rel=5e-3)
    assert on_gpu.updates == on_cpu.updates == 4
    assert on_gpu.gradients.final == pytest.approx(on_cpu.gradients.final, rel=5e-2, abs=1e-6)
