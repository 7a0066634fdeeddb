"""Checkpoints of a suite's runs, so that a run killed outright (SIGKILL at the end of a work session,
its machine gone) continues from where it was instead of from the start.

A suite that can continue a run sets :attr:`~recurbench.suites.base.SuiteDefinition.resumable`: its
``execute`` saves checkpoints through a :class:`CheckpointWriter` and takes ``resume=``, a
:class:`Checkpoint` or None. With ``run --skip-finished``, a plan about to run whose earlier runs
ended FAILED or KILLED (or were just ended as stale: their driver is gone) is handed the newest intact
checkpoint among them (:func:`find_checkpoint`). Where the suite names a
:attr:`~recurbench.suites.base.SuiteDefinition.cap_param`, the runs that differ from the plan only in
that cap count too, FINISHED ones included (:func:`recurbench.suites.runner.resumable_runs`), at steps
before the plan's cap. ``execute`` either continues from it and calls
:meth:`Checkpoint.accept` (the run is tagged ``resumed_from`` = that run's id and ``resumed_at`` = the
step), or calls :meth:`Checkpoint.refuse` with the reason (tag ``resume_refused``, a line at the end
of the command) and starts from the beginning. What the bytes hold is the suite's business; this
module only stores, finds and verifies them.

Where: the run's own MLflow artifacts, folder ``checkpoints/``, in two slots used in turn
(``slot-0.ckpt``, ``slot-1.ckpt``), each followed by its manifest (``slot-N.json``: the step, size and
sha256 of the data). An artifact store writes a file in place, not atomically (the local store copies
it), so a checkpoint counts only when its manifest reads and the data's size and sha256 match it: a
kill in the middle of a write leaves a slot that fails the check, and the other slot, the checkpoint
before, is taken. Two slots keep a run's checkpoints at twice one checkpoint's size however long it runs.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recurbench.records import RunRecord
from recurbench.tracking import RunHandle, Tracker

FOLDER = "checkpoints"
SLOTS = 2
RESUMED_FROM, RESUMED_AT, RESUME_REFUSED, RESUME_NOTES = "resumed_from", "resumed_at", "resume_refused", "resume_notes"
RESUMABLE_STATUSES = ("FAILED", "KILLED")
"""The runs whose checkpoints a new run of their plan may continue from: ended by a crash, a stop, or
as stale (a RUNNING run whose driver is gone is ended FAILED before the new run looks)."""


class CheckpointWriter:
    """Saves a run's checkpoints into its artifacts, the two slots in turn (see the module docstring)."""

    def __init__(self, run: RunHandle) -> None:
        self.run = run
        self.written = 0

    def save(self, step: int, data: bytes) -> None:
        """Store ``data`` as the run's checkpoint at ``step``: the data first, then its manifest."""
        slot = self.written % SLOTS
        name = f"slot-{slot}.ckpt"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_bytes(data)
            self.run.log_artifact(path, FOLDER)
        manifest = {"step": step, "file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                    "written": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}
        self.run.log_text(json.dumps(manifest), f"{FOLDER}/slot-{slot}.json")
        self.written += 1


@dataclass
class Checkpoint:
    """An intact checkpoint of an earlier run of a plan, offered to the plan's next run."""

    run_id: str
    """The run that wrote it (FAILED or KILLED)."""
    step: int
    """How far that run had got (the memory suite: updates; its metrics' step)."""
    data: bytes
    plan_name: str
    accepted: bool = False
    notes: list[str] = field(default_factory=list)
    """Lines for the user: earlier checkpoints passed over, or this one refused (:meth:`refuse`)."""

    def accept(self, run: RunHandle) -> None:
        """``run`` continues from this checkpoint: tag it so."""
        self.accepted = True
        run.set_tags({RESUMED_FROM: self.run_id, RESUMED_AT: self.step})

    def refuse(self, run: RunHandle, reason: str) -> str:
        """``run`` cannot continue from this checkpoint (``reason``) and starts from the beginning: the
        line that says so, tagged on the run and kept for the end of the command."""
        note = (f"{self.plan_name}: the checkpoint of run {self.run_id} at step {self.step:,} was not used: "
                f"{reason}; started from the beginning")
        self.notes.append(note)
        run.set_tags({RESUME_REFUSED: note[:5000]})
        return note


def find_checkpoint(tracker: Tracker, runs: Sequence[RunRecord], plan_name: str, run: RunHandle | None = None,
                    *, before: int | None = None) -> tuple[Checkpoint | None, list[str]]:
    """The newest intact checkpoint (highest step; then the newer run) of ``runs`` (those a plan may
    continue from: :func:`recurbench.suites.runner.resumable_runs`), at a step below ``before`` where
    given (a plan's cap: a longer run's later checkpoints are no state of this plan's run). Also a line
    for each checkpoint passed over (a manifest that does not read, data missing or not what its
    manifest says), tagged on ``run`` too (the run about to start, ``resume_notes``). The list of lines
    is the checkpoint's ``notes``: a refusal joins it."""
    notes: list[str] = []
    found: list[tuple[int, int, str, dict[str, Any]]] = []
    for earlier in runs:
        for slot in range(SLOTS):
            raw = tracker.read_artifact(earlier.run_id, f"{FOLDER}/slot-{slot}.json")
            if raw is None:
                continue
            try:
                manifest = json.loads(raw)
                step, size, digest = int(manifest["step"]), int(manifest["bytes"]), str(manifest["sha256"])
                if not str(manifest["file"]).startswith("slot-"):
                    raise ValueError(f"file {manifest['file']!r}")
            except (ValueError, KeyError, TypeError) as exc:
                notes.append(f"{plan_name}: run {earlier.run_id}'s checkpoint manifest slot-{slot}.json does not read "
                             f"({type(exc).__name__}: {exc}): passed over")
                continue
            if before is not None and step >= before:
                continue
            found.append((step, earlier.start_time, earlier.run_id,
                          {"file": manifest["file"], "bytes": size, "sha256": digest}))
    for step, _, run_id, manifest in sorted(found, key=lambda f: (f[0], f[1], f[2]), reverse=True):
        data = tracker.read_artifact(run_id, f"{FOLDER}/{manifest['file']}")
        if data is None:
            reason = f"its data ({manifest['file']}) is missing"
        elif len(data) != manifest["bytes"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            reason = (f"its data ({manifest['file']}, {len(data):,} bytes) is not what its manifest says "
                      f"({manifest['bytes']:,} bytes, another sha256): a write cut short, or corrupted since")
        else:
            _tag_notes(run, notes)
            return Checkpoint(run_id, step, data, plan_name, notes=notes), notes
        notes.append(f"{plan_name}: the checkpoint of run {run_id} at step {step:,} was passed over: {reason}")
    if notes:
        notes.append(f"{plan_name}: no intact checkpoint left to resume from; started from the beginning")
    _tag_notes(run, notes)
    return None, notes


def _tag_notes(run: RunHandle | None, notes: list[str]) -> None:
    if run is not None and notes:
        run.set_tags({RESUME_NOTES: " | ".join(notes)[:5000]})
