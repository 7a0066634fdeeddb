"""The README's Python snippets run as written, each in a fresh interpreter, and print what the README
says they print: a README snippet that drifts from the API fails here, not in a new user's hands."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippet(containing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    found = [b for b in blocks if containing in b]
    assert len(found) == 1, f"the README should hold one python snippet with {containing!r}, found {len(found)}"
    return found[0]


def _run(code: str, cwd: Path) -> str:
    # A fresh interpreter, as a reader would paste it; in a scratch folder, so that nothing it might
    # write lands in the checkout. No wall-clock limit: the machine may be shared.
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_forecaster_snippet_prints_a_forecast_of_the_three_months_after_the_data(tmp_path):
    out = _run(_snippet("RSAInformerForecaster"), tmp_path)
    # load_airline() ends in December 1960; fh=[1, 2, 3] are the three months after it.
    rows = re.findall(r"^(\d{4}-\d{2})\s+(\S+)$", out, flags=re.M)
    assert [month for month, _ in rows] == ["1961-01", "1961-02", "1961-03"], out
    assert all(math.isfinite(float(value)) for _, value in rows), out


def test_the_agents_snippet_prints_reward_and_episode_length(tmp_path):
    out = _run(_snippet("MemoryPPO"), tmp_path)
    match = re.search(r"^mean reward (\d+\.\d+), mean episode length (\d+) steps", out, flags=re.M)
    assert match, out
    reward, length = float(match[1]), int(match[2])
    # MiniGrid's reward is 1 - 0.9 (steps / limit) on success, else 0; MemoryS7's limit is 5 x 7^2 = 245 steps.
    assert 0.0 <= reward <= 1.0 and 1 <= length <= 245, out
