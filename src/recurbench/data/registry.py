"""The LTSF dataset registry: names, checksums, where files live and how to fetch them.

Location order for a dataset file (first hit wins):
1. an explicit ``data_dir`` (the CLI's ``--data-dir``),
2. ``$RECURBENCH_DATA``,
3. the user cache, ``$XDG_CACHE_HOME/recurbench/data`` (default ``~/.cache/recurbench/data``).

Nothing is downloaded implicitly: only :func:`fetch` (``recurbench data fetch``) goes online, and it
only moves a file into place after its sha256 matched the registry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from recurbench.errors import DataError

ENV_VAR = "RECURBENCH_DATA"

#: How a dataset is split (Informer's ``Dataset_ETT_hour``, ``Dataset_ETT_minute``, ``Dataset_Custom``).
SplitKind = Literal["ett_hour", "ett_minute", "custom"]


@dataclass(frozen=True)
class DatasetSpec:
    """One registered dataset (see ``shared/data/ltsf/SOURCES.md`` for provenance)."""

    name: str
    filename: str
    sha256: str
    size: int
    rows: int
    target: str
    split: SplitKind
    url: str | None
    """Canonical download location; ``None`` where no stable raw URL exists (WTH)."""
    how_to_get: str
    """What a user without a download URL should do."""


_ETT_URL = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/{}.csv"
_ETT_HOW = "run `recurbench data fetch {}` (downloads from the ETDataset repository, CC BY-ND 4.0)"


def _ett(name: str, sha256: str, size: int, rows: int, split: SplitKind) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        filename=f"{name}.csv",
        sha256=sha256,
        size=size,
        rows=rows,
        target="OT",
        split=split,
        url=_ETT_URL.format(name),
        how_to_get=_ETT_HOW.format(name),
    )


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        _ett("ETTh1", "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066", 2589657, 17420, "ett_hour"),
        _ett("ETTh2", "a3dc2c597b9218c7ce1cd55eb77b283fd459a1d09d753063f944967dd6b9218b", 2417960, 17420, "ett_hour"),
        _ett("ETTm1", "6ce1759b1a18e3328421d5d75fadcb316c449fcd7cec32820c8dafda71986c9e", 10360719, 69680, "ett_minute"),
        _ett("ETTm2", "db973ca252c6410a30d0469b13d696cf919648d0f3fd588c60f03fdbdbadd1fd", 9677236, 69680, "ett_minute"),
        DatasetSpec(
            name="WTH",
            filename="WTH.csv",
            sha256="153fead3ea2a83dc5c4127d3994af6b167322f6f5e292c99491f43a2caf14cd4",
            size=2109091,
            rows=35064,
            target="WetBulbCelsius",
            split="custom",
            url=None,
            how_to_get=(
                "WTH has no stable download URL: get WTH.csv from the Informer2020 authors' data "
                "download (linked from their README), put it in one of the folders above, and run "
                "`recurbench data verify WTH` to check its sha256"
            ),
        ),
    )
}


def get_spec(name: str) -> DatasetSpec:
    """Return the registered dataset ``name`` or raise a :class:`DataError` listing the known names."""
    try:
        return DATASETS[name]
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}") from None


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "recurbench" / "data"


def search_dirs(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The folders searched for dataset files, in order."""
    dirs: list[Path] = []
    if data_dir is not None:
        dirs.append(Path(data_dir).expanduser())
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env).expanduser())
    dirs.append(user_cache_dir())
    return dirs


def check_data_dir(data_dir: str | os.PathLike[str] | None) -> None:
    """Raise a :class:`DataError` if an explicit ``data_dir`` (``--data-dir``) is not an existing folder."""
    if data_dir is not None and not Path(data_dir).expanduser().is_dir():
        # An explicit folder that is not there is a typo, not a reason to read another copy.
        raise DataError(f"data folder {data_dir} (--data-dir) does not exist")


def locate(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of the registered dataset's file; a :class:`DataError` says where it looked if missing (or
    that an explicit ``data_dir`` does not exist: the search does not fall through to the others then)."""
    spec = get_spec(name)
    check_data_dir(data_dir)
    dirs = search_dirs(data_dir)
    for folder in dirs:
        candidate = folder / spec.filename
        if candidate.is_file():
            return candidate
    raise DataError(not_found_message([spec], dirs))


def not_found_message(specs: Sequence[DatasetSpec], dirs: Sequence[Path]) -> str:
    """Where the dataset files of ``specs`` were looked for and how to get them: one message for all
    of them (one ``data fetch`` for those with a URL), not one per file."""
    if len(specs) == 1:
        (spec,) = specs
        looked = "\n".join(f"  - {folder / spec.filename}" for folder in dirs)
        return (f"dataset file {spec.filename} not found. Looked in (--data-dir, ${ENV_VAR}, user cache):\n"
                f"{looked}\nTo get it: {spec.how_to_get}, or point --data-dir / ${ENV_VAR} at a folder holding it.")
    looked = "\n".join(f"  - {folder}" for folder in dirs)
    fetched = [s.name for s in specs if s.url is not None]
    ways = [_ETT_HOW.format(" ".join(fetched))] if fetched else []  # only the ETT files have a URL
    ways += [s.how_to_get for s in specs if s.url is None]
    return (f"dataset files {', '.join(s.filename for s in specs)} not found. Looked in the folders "
            f"(--data-dir, ${ENV_VAR}, user cache):\n{looked}\nTo get them: {'; '.join(ways)}; or point "
            f"--data-dir / ${ENV_VAR} at a folder holding them.")


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class VerifyResult:
    name: str
    status: Literal["ok", "mismatch", "missing"]
    path: Path | None
    expected: str
    actual: str | None = None
    message: str = ""


def verify(names: Iterable[str] | None = None, data_dir: str | os.PathLike[str] | None = None) -> list[VerifyResult]:
    """Check the sha256 of each located dataset file against the registry."""
    results = []
    for name in names or list(DATASETS):
        spec = get_spec(name)
        try:
            path = locate(name, data_dir)
        except DataError as exc:
            results.append(VerifyResult(name, "missing", None, spec.sha256, message=str(exc)))
            continue
        actual = sha256_of(path)
        status = "ok" if actual == spec.sha256 else "mismatch"
        message = "" if status == "ok" else f"{path}: sha256 expected {spec.sha256}, actual {actual}"
        results.append(VerifyResult(name, status, path, spec.sha256, actual, message))
    return results


def fetch_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where ``fetch`` writes: ``data_dir``, else ``$RECURBENCH_DATA``, else the user cache."""
    return search_dirs(data_dir)[0]


def fetch(name: str, data_dir: str | os.PathLike[str] | None = None, *, force: bool = False) -> Path:
    """Download a registered dataset, verify its sha256, then move it into place atomically.

    The download goes to a temporary file in the destination folder; a checksum mismatch deletes it
    and raises with expected vs actual, so nothing partial or wrong is ever left under the real name.
    An existing file with the right checksum is kept (``force`` re-downloads).
    """
    spec = get_spec(name)
    dest_dir = fetch_dir(data_dir)
    dest = dest_dir / spec.filename
    if dest.is_file() and not force:
        actual = sha256_of(dest)
        if actual == spec.sha256:
            return dest
        raise DataError(
            f"{dest} exists but its sha256 is {actual}, expected {spec.sha256}; "
            "remove it or pass --force to download it again"
        )
    if spec.url is None:
        raise DataError(f"cannot download {spec.filename}: {spec.how_to_get}")
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".part", dir=dest_dir)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(spec.url, timeout=60) as response:  # noqa: S310 (registry URL)
                    shutil.copyfileobj(response, out)
            except OSError as exc:
                raise DataError(f"download of {spec.filename} from {spec.url} failed: {exc}") from exc
        actual = sha256_of(tmp)
        if actual != spec.sha256:
            raise DataError(
                f"refusing {spec.filename} downloaded from {spec.url}: sha256 expected {spec.sha256}, "
                f"actual {actual}"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
