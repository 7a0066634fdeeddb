"""write_report(): the files exist, embed or link every figure, and the figures reach MLflow;
REM matrices match the paper's definitions entry by entry."""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from recurbench.errors import ConfigError, RecurbenchError
from recurbench.reporting.by_suite import write_report
from recurbench.reporting.rem import RemHead, parse_rem_params, rem_matrix

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ltsf_report(store, tmp_path_factory):
    return write_report("ltsf", tmp_path_factory.mktemp("ltsf-report"), tracking_uri=store.uri)


def test_ltsf_html_report_embeds_every_figure(ltsf_report):
    names = {f.name for f in ltsf_report.figures}
    assert {"ltsf_loss_curves", "ltsf_rem_gates", "ltsf_rem_rsa_informer", "ltsf_forecast_ETTh1_24"} <= names
    for fig in ltsf_report.figures:
        assert fig.path.read_bytes().startswith(PNG_MAGIC)
    text = ltsf_report.path.read_text()
    assert ltsf_report.path.name == "report.html"
    assert text.count("src='data:image/png;base64,") == len(ltsf_report.figures)
    assert "<img" in text and "src='figures/" not in text  # self-contained: nothing linked
    assert "0.700 ± 0.100 (n=3)<br>paper 0.762<br>Δ -0.062" in text  # the comparison table
    assert "RuntimeError: out of memory" in text  # failed run listed
    # RSA-LogSparse and RSA-XL runs logged gates but no REM parameters: said, not failed
    assert any("rsa_logsparse" in o for o in ltsf_report.omitted)


def test_report_of_a_quick_profile_says_the_papers_figures_are_not_comparable(ltsf_report, store, tmp_path):
    text = html.unescape(ltsf_report.path.read_text())
    caveat = ltsf_report.comparison.paper_caveat
    assert caveat.startswith("not comparable with the paper's figures: profile quick")
    assert f"<li>{caveat}</li>" in text  # in the summary at the top
    assert "ours only: the paper's counts are left out" in text and "28/32" not in text
    report = write_report("minigrid", tmp_path, tracking_uri=store.uri, fmt="markdown", log_to_mlflow=False)
    caption = next(line for line in report.path.read_text().splitlines() if line.startswith("Final train and test reward"))
    assert caption.endswith(f"Ours are {report.comparison.paper_caveat}.")


def test_figures_logged_to_latest_parent_run(store, ltsf_report):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store.uri)
    parents = client.search_runs(
        [client.get_experiment_by_name("recurbench-ltsf").experiment_id],
        filter_string="tags.role = 'parent'", order_by=["attributes.start_time DESC"],
    )
    assert ltsf_report.logged_to_run == parents[0].info.run_id and parents[0].data.tags["profile"] == "quick"
    logged = {a.path for a in client.list_artifacts(ltsf_report.logged_to_run, "report")}
    assert {f"report/{f.path.name}" for f in ltsf_report.figures} | {"report/report.html"} <= logged


def test_minigrid_markdown_report_links_pngs(store, tmp_path):
    report = write_report("minigrid", tmp_path, tracking_uri=store.uri, fmt="markdown", log_to_mlflow=False)
    text = report.path.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links == ["figures/minigrid_learning_curves.png", "figures/minigrid_generalisation.png"]
    for link in links:
        assert (tmp_path / link).read_bytes().startswith(PNG_MAGIC)
    assert "| DoorKey | rellstm | 0.920 ± 0.035 (n=3)<br>paper 0.930<br>Δ -0.010 |" in text
    assert report.logged_to_run is None


def test_cli_report_and_bad_format(store, tmp_path):
    from recurbench.cli import app

    result = CliRunner().invoke(app, ["report", "minigrid", "--out", str(tmp_path), "--tracking-uri", store.uri, "--no-log"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").is_file() and (tmp_path / "figures" / "minigrid_learning_curves.png").is_file()
    with pytest.raises(ConfigError, match="unknown report format 'pdf'"):
        write_report("minigrid", tmp_path, tracking_uri=store.uri, fmt="pdf")
    assert "also holds" not in result.output


def test_a_report_into_another_reports_folder_names_the_figures_it_did_not_draw(store, tmp_path):
    # The ltsf report's figures sat beside the minigrid report's, unsaid.
    ltsf = write_report("ltsf", tmp_path, tracking_uri=store.uri, log_to_mlflow=False)
    minigrid = write_report("minigrid", tmp_path, tracking_uri=store.uri, log_to_mlflow=False)
    assert minigrid.stale == sorted(f.path.name for f in ltsf.figures) and ltsf.stale == []
    assert all((tmp_path / "figures" / name).is_file() for name in minigrid.stale)  # left as they are
    from recurbench.cli import app

    result = CliRunner().invoke(app, ["report", "minigrid", "--out", str(tmp_path), "--tracking-uri", store.uri, "--no-log"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert (f"{tmp_path / 'figures'} also holds {len(ltsf.figures)} file(s) this report did not draw, left as they are "
            f"(an earlier report's?): {', '.join(minigrid.stale[:3])} and {len(ltsf.figures) - 3} more") in result.output


def test_an_out_path_that_cannot_hold_a_report_is_refused_by_name_before_anything_is_read(store, tmp_path):
    """--out naming a file (or a folder under one, or where the system creates no folder) is one error
    naming the path, raised before the store is read (a missing store is not even reported) and with
    nothing written; a report that fails after its folder was made takes the folder away again."""
    from recurbench.cli import app

    afile = tmp_path / "afile"
    afile.write_text("keep me")
    missing = f"sqlite:///{tmp_path / 'never.db'}"
    with pytest.raises(RecurbenchError, match=f"^--out {re.escape(str(afile))}: {re.escape(str(afile))} is a file, "
                                              "not a folder$"):
        write_report("minigrid", afile, tracking_uri=missing)
    under = afile / "report"
    with pytest.raises(RecurbenchError, match=f"^--out {re.escape(str(under))}: {re.escape(str(afile))} is a file, "
                                              "not a folder to create it in$"):
        write_report("minigrid", under, tracking_uri=missing, fmt="markdown")
    taken = tmp_path / "taken"
    (taken / "figures").parent.mkdir()
    (taken / "figures").write_text("not a folder")
    with pytest.raises(RecurbenchError, match=f"^--out {re.escape(str(taken))}: {re.escape(str(taken / 'figures'))} "
                                              "is a file, where the report writes its figures$"):
        write_report("minigrid", taken, tracking_uri=missing)
    assert afile.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["afile", "taken"]
    if Path("/proc/self").is_dir():  # Linux: procfs refuses a new folder, root or not
        with pytest.raises(RecurbenchError, match="^--out /proc/nope: cannot create a folder there: "):
            write_report("minigrid", "/proc/nope", tracking_uri=missing)
    # A folder made for the report is taken away again when the report fails (here: no store).
    with pytest.raises(RecurbenchError, match="no MLflow store"):
        write_report("minigrid", tmp_path / "new" / "report", tracking_uri=missing)
    assert not (tmp_path / "new").exists() and not (tmp_path / "never.db").exists()
    result = CliRunner().invoke(app, ["report", "memory", "--out", str(afile), "--tracking-uri", store.uri, "--no-log"])
    assert isinstance(result.exception, RecurbenchError) and str(result.exception) == (
        f"--out {afile}: {afile} is a file, not a folder")


def test_rem_matrices_follow_the_paper():
    lam, gamma, theta = -0.5, 0.9, math.pi / 3
    reg = rem_matrix(RemHead("l", 0, "regular", lam=lam), 4)
    expected = np.array([[0, 0, 0, 0], [lam, 0, 0, 0], [lam**2, lam, 0, 0], [lam**3, lam**2, lam, 0]])
    np.testing.assert_allclose(reg, expected)
    sin = rem_matrix(RemHead("l", 0, "cyclical_sin", gamma=gamma, theta=theta), 5)
    assert sin[3, 1] == pytest.approx(gamma**2 * math.sin(2 * theta)) and sin[1, 3] == 0
    cos = rem_matrix(RemHead("l", 0, "cyclical_cos", gamma=gamma, theta=theta), 5, masked=False)
    assert cos[1, 4] == pytest.approx(gamma**3 * math.cos(3 * theta)) == pytest.approx(cos[4, 1])
    dil = rem_matrix(RemHead("l", 0, "regular", lam=0.5, dilation=2), 6)  # k mod 2 == 0, exponent k/2
    assert dil[2, 0] == pytest.approx(0.5) and dil[4, 0] == pytest.approx(0.25) and dil[1, 0] == 0 and dil[3, 0] == 0


def test_rem_params_parallel_lists_with_kinds():
    logged = {"encoder.0.self": {"kind": ["regular", "cos", "sin"], "lambda": [0.8, float("nan"), float("nan")],
                                 "gamma": [float("nan"), 0.9, 0.9], "theta": [float("nan"), 0.5, 0.5], "dilation": [1, 24, 1]}}
    heads = parse_rem_params(logged)
    assert [(h.layer, h.head, h.kind, h.dilation) for h in heads] == [
        ("encoder.0.self", 0, "regular", 1), ("encoder.0.self", 1, "cyclical_cos", 24), ("encoder.0.self", 2, "cyclical_sin", 1)
    ]
    assert heads[0].lam == 0.8 and heads[2].theta == 0.5


def test_a_layer_logged_two_sided_is_drawn_two_sided():
    logged = {"decoder.0.cross": {"kind": ["regular"], "lambda": [0.5], "dilation": [1], "masked": False},
              "decoder.0.self": {"kind": ["regular"], "lambda": [0.5], "dilation": [1], "masked": True},
              "old.0.self": {"kind": ["regular"], "lambda": [0.5], "dilation": [1]}}  # before 'masked' was logged
    cross, causal, old = parse_rem_params(logged)
    assert (cross.masked, causal.masked, old.masked) == (False, True, True)
    two_sided = rem_matrix(cross, 4)
    np.testing.assert_allclose(two_sided, two_sided.T)
    assert two_sided[0, 2] == pytest.approx(0.25) and rem_matrix(causal, 4)[0, 2] == 0
