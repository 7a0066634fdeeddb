"""The data commands' errors: a missing file's whole message, and a --data-dir that does not exist."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from recurbench.cli import app
from recurbench.errors import DataError

runner = CliRunner()


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No dataset anywhere: $RECURBENCH_DATA and the user cache point at empty folders."""
    (tmp_path / "env").mkdir()
    monkeypatch.setenv("RECURBENCH_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_data_verify_prints_the_folders_it_looked_in_and_how_to_get_the_file(nowhere):
    result = runner.invoke(app, ["data", "verify", "ETTh1"], env={"COLUMNS": "80"})
    assert result.exit_code == 1
    assert isinstance(result.exception, DataError)
    assert str(result.exception) == (
        "dataset file ETTh1.csv not found. Looked in (--data-dir, $RECURBENCH_DATA, user cache):\n"
        f"  - {nowhere / 'env' / 'ETTh1.csv'}\n"
        f"  - {nowhere / 'cache' / 'recurbench' / 'data' / 'ETTh1.csv'}\n"
        "To get it: run `recurbench data fetch ETTh1` (downloads from the ETDataset repository, CC BY-ND 4.0), "
        "or point --data-dir / $RECURBENCH_DATA at a folder holding it."
    )
    row = next(line for line in result.output.splitlines() if "ETTh1" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["ETTh1", "missing", "-", "not found (see below)"]


def test_data_verify_names_the_missing_files_in_one_message(nowhere):
    """Five missing files were five full messages, each listing the same folders: now one, with one
    `data fetch` for the files that have a URL and the way to get the one that has none."""
    result = runner.invoke(app, ["data", "verify", "ETTh1", "WTH", "ETTm2", "ETTh1"])
    assert result.exit_code == 1
    assert str(result.exception) == (
        "dataset files ETTh1.csv, WTH.csv, ETTm2.csv not found. Looked in the folders (--data-dir, "
        "$RECURBENCH_DATA, user cache):\n"
        f"  - {nowhere / 'env'}\n"
        f"  - {nowhere / 'cache' / 'recurbench' / 'data'}\n"
        "To get them: run `recurbench data fetch ETTh1 ETTm2` (downloads from the ETDataset repository, "
        "CC BY-ND 4.0); WTH has no stable download URL: get WTH.csv from the Informer2020 authors' data "
        "download (linked from their README), put it in one of the folders above, and run "
        "`recurbench data verify WTH` to check its sha256; or point --data-dir / $RECURBENCH_DATA at a "
        "folder holding them."
    )


@pytest.mark.parametrize("command", [["data", "list"], ["data", "verify"], ["data", "list", "--json"]])
def test_a_data_dir_that_does_not_exist_is_an_error(nowhere, command):
    # As for `run`: a typo in --data-dir is reported, not listed as every dataset missing.
    missing = nowhere / "typo"
    result = runner.invoke(app, [*command, "--data-dir", str(missing)])
    assert result.exit_code == 1
    assert isinstance(result.exception, DataError)
    assert str(result.exception) == f"data folder {missing} (--data-dir) does not exist"
    assert result.output == ""  # no table of datasets, all "missing"


def test_data_list_shows_where_each_file_is(nowhere):
    (nowhere / "mine").mkdir()
    (nowhere / "mine" / "ETTh2.csv").write_text("x")
    result = runner.invoke(app, ["data", "list", "--json", "--data-dir", str(nowhere / "mine")])
    assert result.exit_code == 0, result.output
    paths = {item["name"]: item["path"] for item in json.loads(result.output)}
    assert paths == {"ETTh1": None, "ETTh2": str(nowhere / "mine" / "ETTh2.csv"), "ETTm1": None, "ETTm2": None,
                     "WTH": None}
