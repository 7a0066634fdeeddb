"""Registry: location order, sha256 verification and fetch's verify-then-move."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from recurbench.data import registry
from recurbench.errors import DataError


def test_shared_data_verifies(data_dir):
    results = registry.verify(data_dir=data_dir)
    assert [r.name for r in results] == ["ETTh1", "ETTh2", "ETTm1", "ETTm2", "WTH"]
    assert all(r.status == "ok" for r in results), [r.message for r in results]


def test_location_order_data_dir_then_env_then_cache(tmp_path, monkeypatch):
    for folder in ("explicit", "env", "cache/recurbench/data"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.setenv("RECURBENCH_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "cache/recurbench/data/ETTh1.csv").write_text("x")
    assert registry.locate("ETTh1", tmp_path / "explicit") == tmp_path / "cache/recurbench/data/ETTh1.csv"
    (tmp_path / "env/ETTh1.csv").write_text("x")
    assert registry.locate("ETTh1", tmp_path / "explicit") == tmp_path / "env/ETTh1.csv"
    (tmp_path / "explicit/ETTh1.csv").write_text("x")
    assert registry.locate("ETTh1", tmp_path / "explicit") == tmp_path / "explicit/ETTh1.csv"


def test_an_explicit_data_dir_that_does_not_exist_is_an_error_not_a_fall_through(tmp_path, monkeypatch):
    # A typo in --data-dir must not quietly read the copy under $RECURBENCH_DATA.
    (tmp_path / "env").mkdir()
    (tmp_path / "env/ETTh1.csv").write_text("x")
    monkeypatch.setenv("RECURBENCH_DATA", str(tmp_path / "env"))
    missing = tmp_path / "typo"
    with pytest.raises(DataError, match=rf"^data folder {missing} \(--data-dir\) does not exist$"):
        registry.locate("ETTh1", missing)
    assert registry.locate("ETTh1") == tmp_path / "env/ETTh1.csv"
    (result,) = registry.verify(["ETTh1"], missing)
    assert result.status == "missing" and "does not exist" in result.message
    assert registry.fetch_dir(missing) == missing  # fetch may still create it


def test_verify_reports_a_mismatch_with_expected_and_actual(tmp_path):
    (tmp_path / "ETTh1.csv").write_text("not the real file\n")
    (result,) = registry.verify(["ETTh1"], tmp_path)
    actual = hashlib.sha256(b"not the real file\n").hexdigest()
    assert result.status == "mismatch" and result.actual == actual
    assert registry.DATASETS["ETTh1"].sha256 in result.message and actual in result.message


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A registered dataset whose URL is a local file:// source."""
    source = tmp_path / "upstream.csv"
    source.write_bytes(b"date,OT\n2020-01-01 00:00:00,1\n")
    good = hashlib.sha256(source.read_bytes()).hexdigest()
    spec = dataclasses.replace(registry.DATASETS["ETTh1"], url=source.as_uri(), sha256=good)
    monkeypatch.setitem(registry.DATASETS, "ETTh1", spec)
    return tmp_path / "dest", spec


def test_fetch_verifies_then_moves_into_place(served):
    dest, spec = served
    path = registry.fetch("ETTh1", dest)
    assert path == dest / "ETTh1.csv" and registry.sha256_of(path) == spec.sha256
    assert sorted(p.name for p in dest.iterdir()) == ["ETTh1.csv"]  # no temporary file left behind


def test_fetch_refuses_a_checksum_mismatch_and_leaves_nothing(served, monkeypatch):
    dest, spec = served
    wrong = "0" * 64
    monkeypatch.setitem(registry.DATASETS, "ETTh1", dataclasses.replace(spec, sha256=wrong))
    with pytest.raises(DataError) as info:
        registry.fetch("ETTh1", dest)
    assert f"sha256 expected {wrong}, actual {spec.sha256}" in str(info.value)
    assert list(dest.iterdir()) == []


def test_fetch_without_url_explains_how_to_get_the_file(tmp_path):
    with pytest.raises(DataError, match="WTH has no stable download URL"):
        registry.fetch("WTH", tmp_path)


def test_unknown_dataset_lists_known_names():
    with pytest.raises(DataError, match="unknown dataset 'ETTh9'; known datasets: ETTh1, ETTh2"):
        registry.get_spec("ETTh9")
