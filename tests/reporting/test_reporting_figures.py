"""The report's figures are readable: one box per attention layer, panels wrapped into a grid, and
legends that cover no data."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from recurbench.reporting import figures
from recurbench.reporting.report import _layer_gates

DPI = 110  # what the report saves at


def _drawn(fig):
    fig.savefig(io.BytesIO(), dpi=DPI)  # lays the figure out
    return fig


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_a_layer_logged_per_epoch_and_at_the_end_is_one_layer_at_its_final_value():
    # What the ltsf suite logs: gate.<layer> after each epoch (latest: the last epoch's) and
    # final_gate.<layer> from the weights it tested (early stopping restored epoch 1's).
    metrics = {"gate.encoder.0.self": 0.91, "gate.decoder.0.cross": 0.99, "test_mse": 0.5,
               "final_gate.encoder.0.self": 0.73, "final_gate.decoder.0.cross": 0.75}
    assert _layer_gates(metrics) == {"encoder.0.self": 0.73, "decoder.0.cross": 0.75}
    assert _layer_gates({"gate.block.0.self": 0.6}) == {"block.0.self": 0.6}  # a run without final values
    assert _layer_gates({"test_mse": 0.5}) == {}


def test_gate_figure_is_a_grid_with_one_box_per_layer():
    informer = ["encoder.0.self", "encoder.1.self", "decoder.0.self", "decoder.0.cross"]
    rows = [("rsa_informer", layer, 0.5 + 0.01 * seed) for layer in informer[::-1] for seed in range(3)]
    rows += [(model, f"block.{i}.self", 0.7) for model in ("rsa_logsparse", "rsa_xl", "rsa_custom", "rsa_other")
             for i in range(3)]
    fig = _drawn(figures.gate_boxplots(pd.DataFrame(rows, columns=["model", "layer", "value"])))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["rsa_informer", "rsa_logsparse", "rsa_xl", "rsa_custom", "rsa_other"]
    # the network's order, each layer once
    assert [t.get_text() for t in axes[0].get_xticklabels()] == informer
    assert [t.get_text() for t in axes[1].get_xticklabels()] == ["block.0.self", "block.1.self", "block.2.self"]
    width, height = fig.get_size_inches() * DPI
    assert len({round(ax.get_position().y0, 3) for ax in axes}) == 2  # five panels wrap onto two rows
    assert width <= 1600 and width / height < 3


def test_the_gate_figures_title_fits_one_panel():
    # With one RSA model the figure is one 3.6-inch panel wide: its title was cut on both sides.
    fig = _drawn(figures.gate_boxplots(pd.DataFrame([("rsa_informer", "encoder.0.self", 0.5)],
                                                    columns=["model", "layer", "value"])))
    box, width = fig._suptitle.get_window_extent(), fig.get_size_inches()[0] * fig.dpi
    assert 0 <= box.x0 and box.x1 <= width


@pytest.mark.parametrize("name", ["loss_curves", "learning_curves", "forecast_figure", "generalisation_bars"])
def test_legends_stand_outside_the_panels(name):
    steps = [1, 2, 3]
    if name == "loss_curves":
        curves = pd.DataFrame([("ETTh1", 24, m, 0, "val_loss", s, 1.0 / s + i) for i, m in enumerate(["informer", "rsa_informer"])
                               for s in steps], columns=["dataset", "horizon", "model", "seed", "metric", "step", "value"])
        test = pd.DataFrame([("ETTh1", 24, "informer", 0.9), ("ETTh1", 24, "rsa_informer", 0.95)],
                            columns=["dataset", "horizon", "model", "mean"])
        fig = figures.loss_curves(curves, test)
    elif name == "learning_curves":
        curves = pd.DataFrame([("DoorKey", a, 0, 1000 * s, 0.2 * s) for a in ["lstm", "rellstm"] for s in steps],
                              columns=["env", "agent", "seed", "step", "value"])
        finals = pd.DataFrame([("DoorKey", a, 0.6, 0.6) for a in ["lstm", "rellstm"]], columns=["env", "agent", "train", "test"])
        fig = figures.learning_curves(curves, finals)
    elif name == "forecast_figure":
        t = np.linspace(0, 6, 72)
        example = {"history": np.sin(t[:48]), "truth": np.sin(t[48:]), "prediction": np.sin(t[48:]) + 0.1}
        fig = figures.forecast_figure([("informer", example), ("rsa_informer", example)], "forecast")
    else:
        cells = pd.DataFrame([("DoorKey", a, m, 0.95, 0.01, 0.9) for a in ["lstm", "rellstm"]
                              for m in ["train_reward", "test_reward"]],
                             columns=["env", "agent", "metric", "mean", "std", "paper"])
        fig = figures.generalisation_bars(cells)
    fig = _drawn(fig)
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert not any(_overlaps(box, ax.get_window_extent()) for ax in fig.axes if ax.get_visible())


def test_a_plugin_models_colour_is_the_same_in_every_process() -> None:
    """A model outside the RSA families is coloured from its name: the same name gets the same colour
    in every report, whatever the process's string-hash seed (reports of one study must match)."""
    import os
    import subprocess
    import sys

    code = ("from recurbench.reporting.figures import _model_style; "
            "print([_model_style(m)['color'] for m in ('my_model', 'gru_plugin', 'x', 'another_one')])")
    colours = {
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                       capture_output=True, text=True, check=True).stdout
        for seed in ("0", "1", "2", "3")
    }
    assert len(colours) == 1
    assert figures._model_style("informer")["color"] != figures._model_style("my_model")["color"]


def test_gate_panels_come_in_the_order_given_then_alphabetically() -> None:
    """langs draws a panel per language in the suite's order (tomita3 before tomita5 before d2...),
    not the alphabet's; an unknown name goes last."""
    gates = pd.DataFrame([(m, "layers.0", 0.5) for m in ("zzz", "d2", "tomita5", "tomita3")],
                         columns=["model", "layer", "value"])
    fig = figures.gate_boxplots(gates, order=["tomita3", "tomita5", "d2"])
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["tomita3", "tomita5", "d2", "zzz"]
    ltsf = figures.gate_boxplots(gates.assign(model=["rsa_transformer_xl", "rsa_informer", "x", "rsa_logsparse"]))
    assert [ax.get_title() for ax in ltsf.axes if ax.get_title()] == ["rsa_informer", "rsa_logsparse", "rsa_transformer_xl", "x"]
