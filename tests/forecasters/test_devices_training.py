"""Training and evaluation run where the model is: on a CUDA machine, a model moved to the GPU forecasts
what it forecasts on the CPU, and an estimator trains there. Skipped without a GPU (the CPU paths are the
rest of the suite; the refusals of a missing GPU are in ``tests/test_devices.py``)."""

from __future__ import annotations

import pytest
import torch

from recurbench.forecasters.models import build_network
from recurbench.forecasters.training import evaluate, model_device

from .test_models import CFG as MODELS_CFG
from .windows import sine_windows

CFG = MODELS_CFG.with_(n_features=1)  # the network tests' tiny config, on the one-series sine windows
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("name", ["rsa_logsparse", "rsa_xl"])  # deterministic in eval mode (no sampled keys)
def test_a_model_on_the_gpu_forecasts_what_it_forecasts_on_the_cpu(name):
    torch.manual_seed(0)
    model = build_network(name, CFG)
    data = sine_windows(CFG, 64)
    on_cpu = evaluate(model, data, CFG.pred_len)
    on_gpu = evaluate(model.to("cuda"), data, CFG.pred_len)  # the REM path is the Triton kernel there
    assert on_gpu["mse"] == pytest.approx(on_cpu["mse"], rel=1e-3)
    assert on_gpu["mae"] == pytest.approx(on_cpu["mae"], rel=1e-3)


@cuda
def test_an_estimator_trains_and_forecasts_on_the_gpu():
    import numpy as np
    import pandas as pd

    from recurbench.forecasters.estimators import RSAInformerForecaster

    index = pd.date_range("2020-01-01", periods=160, freq="h")
    y = pd.DataFrame({"a": np.sin(np.arange(160) * 2 * np.pi / 24)}, index=index)
    f = RSAInformerForecaster(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1,
                              rem_heads=(0, 1, 1, 0, 0, 0), device="cuda", random_state=0)
    pred = f.fit(y, fh=[1, 2, 3]).predict()
    assert model_device(f.network_).type == "cuda" and np.isfinite(pred.to_numpy()).all()
