"""The six regular languages of the RSA paper's Table 2 (Huang et al., ICLR 2023, Sec. 4.2 and App. E.2):
Parity, Tomita 3, Tomita 5, Tomita 6, D_2 and D_4, as Bhattamishra et al. (2020) generate them.

The authoritative description is ``shared/reference/formal_languages.md`` (the "fact sheet"); its
section numbers are cited below. Every language is a DFA (:class:`DFA`), which gives membership, the
per-position targets and the number of members of each length (for the feasibility checks).

Per-position targets (fact sheet Sec. 3), two units per symbol, for the prefix ending at that symbol:

* Parity, Tomita 5, Tomita 6 -- prefix membership, one-hot: ``[1, 0]`` not in L, ``[0, 1]`` in L.
* Tomita 3 -- next-symbol bits: unit c is 1 iff the prefix followed by symbol c is *in L* (an
  accepting state). So in ``"100"`` the target after ``"1"`` says '0' is not allowed (state C counts
  as dead, as in the reference code).
* D_n -- (a allowed, b allowed) from the prefix depth d: ``(1, 0)`` at d = 0, ``(1, 1)`` for
  0 < d < n, ``(0, 1)`` at d = n: unit c is 1 iff the prefix followed by c can still be completed.

Sampling (fact sheet Sec. 2), every string a member of its language:

* Parity -- the reference code's geometric sampler: with L = floor((lo + hi) / 2) each step emits
  '0' or '1' with probability L / (2 (1 + L)) each, or stops with probability 1 / (1 + L); it also
  stops at length hi. A draw outside [lo, hi] is rejected; one with an odd number of 1s is repaired by
  appending '1' and kept only if still no longer than hi.
* Tomita 5 and 6 -- the same geometric sampler, non-members rejected.
* Tomita 3 -- the reference code's run sampler: length uniform in [lo, hi], then runs: a symbol
  uniformly, a run length uniform in [0, remaining], except that the 0-run after an odd 1-run gets an
  even length (its total, when runs of one symbol meet, is kept even). It favours few long runs, so
  short lengths run out of distinct strings: the kept strings' lengths skew long (mean ~33 in [2, 50]).
* D_n -- **our own sampler** (the reference one cannot supply enough distinct strings, Sec. 2): a
  length uniform over the even lengths in the window, then a string drawn *exactly uniformly* among
  the members of that length that reach depth n (as every reference string does), by a random walk on
  the depth whose steps are weighted by the number of completions (dynamic programming over
  (steps left, depth, depth n reached yet)). Its lengths are spread over the window instead of
  gathering near 0.75 hi, so D_n comparisons with the paper are approximate.

Splits (Sec. 2): train and bin 0 are one pool of ``train_size + test_size`` distinct strings from
the training window (the first ``train_size`` train, the rest bin 0); bin 1 is drawn from the longer
window. **No string appears twice, in a split or across splits**: duplicates are rejected after the
Parity repair, unlike the reference code, whose duplicate check looks at the raw draw (Sec. 2's
quirk: 346 of its 2,000 Parity bin-0 strings were in train).

Generation is deterministic given the settings (:class:`LangDataSpec`, its ``seed`` feeding NumPy's
``SeedSequence``); a dataset is cached as JSON under a digest of its settings in
``$XDG_CACHE_HOME/recurbench/langs`` (or the folder given), and carries a content digest, sha256 of
the settings and the strings, which the runs that use it tag.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from recurbench.errors import ConfigError, DataError

GENERATOR_VERSION = 1
"""Bumped whenever a sampler changes what it draws, so that a cached dataset of an older sampler is
not reused (it is part of the cache key and of the content digest)."""

SPLITS = ("train", "bin0", "bin1")
PAD = 0
"""Input id of padding; the two symbols are 1 and 2, in alphabet order."""

# ------------------------------------------------------------------------------------------- DFAs


@dataclass(frozen=True)
class DFA:
    """A complete DFA over a two-symbol alphabet: ``delta[state] = (next on alphabet[0], next on alphabet[1])``."""

    alphabet: str
    delta: tuple[tuple[int, int], ...]
    start: int
    accepting: frozenset[int]

    @property
    def n_states(self) -> int:
        return len(self.delta)

    @cached_property
    def live(self) -> frozenset[int]:
        """States from which an accepting state can still be reached."""
        live = set(self.accepting)
        changed = True
        while changed:
            changed = False
            for s, nxt in enumerate(self.delta):
                if s not in live and any(t in live for t in nxt):
                    live.add(s)
                    changed = True
        return frozenset(live)

    def states(self, string: str) -> list[int]:
        """The state after each symbol of ``string`` (its length)."""
        index = {c: i for i, c in enumerate(self.alphabet)}
        s, out = self.start, []
        for ch in string:
            s = self.delta[s][index[ch]]
            out.append(s)
        return out

    def accepts(self, string: str) -> bool:
        return (self.states(string)[-1] if string else self.start) in self.accepting

    def count_by_length(self, max_len: int) -> list[int]:
        """Number of members of each length 0..max_len (exact integers)."""
        ways = [0] * self.n_states
        ways[self.start] = 1
        out = []
        for _ in range(max_len + 1):
            out.append(sum(ways[s] for s in self.accepting))
            nxt = [0] * self.n_states
            for s, w in enumerate(ways):
                if w:
                    for t in self.delta[s]:
                        nxt[t] += w
            ways = nxt
        return out


def _parity() -> DFA:
    return DFA("01", ((0, 1), (1, 0)), 0, frozenset({0}))  # state = number of 1s mod 2


def _tomita3() -> DFA:
    # Fact sheet Sec. 1: A=0 start/accept, B=1 accept (odd 1-run open), C=2 reject but live (odd 1s then
    # odd 0s), D=3 accept (odd 1s then even >= 2 0s), X=4 dead.
    a, b, c, d, x = range(5)
    return DFA("01", ((a, b), (c, a), (d, x), (c, b), (x, x)), a, frozenset({a, b, d}))


def _tomita5() -> DFA:
    # state = (#0 mod 2) + 2 (#1 mod 2)
    return DFA("01", tuple((s ^ 1, s ^ 2) for s in range(4)), 0, frozenset({0}))


def _tomita6() -> DFA:
    # state = (#0 - #1) mod 3
    return DFA("01", tuple(((s + 1) % 3, (s - 1) % 3) for s in range(3)), 0, frozenset({0}))


def _dyck(n: int) -> DFA:
    # state = depth 0..n, n + 1 = dead (below 0 or above n)
    dead = n + 1
    delta = tuple((d + 1 if d < n else dead, d - 1 if d > 0 else dead) for d in range(n + 1))
    return DFA("ab", (*delta, (dead, dead)), 0, frozenset({0}))


# ------------------------------------------------------------------------------------------ targets

TARGET_RULES = ("membership", "next_in_language", "next_live")


def target_table(dfa: DFA, rule: str) -> np.ndarray:
    """``[n_states, 2]``: the two target units after a prefix that ends in each state (module docstring)."""
    rows = []
    for s, (t0, t1) in enumerate(dfa.delta):
        if rule == "membership":
            rows.append((0.0, 1.0) if s in dfa.accepting else (1.0, 0.0))
        elif rule == "next_in_language":
            rows.append((float(t0 in dfa.accepting), float(t1 in dfa.accepting)))
        elif rule == "next_live":
            rows.append((float(t0 in dfa.live), float(t1 in dfa.live)))
        else:
            raise ValueError(f"unknown target rule {rule!r}; known: {', '.join(TARGET_RULES)}")
    return np.asarray(rows, dtype=np.float32)


# ----------------------------------------------------------------------------------------- samplers

Sampler = Callable[[np.random.Generator, int, int], "str | None"]
"""``sampler(rng, lo, hi)``: one draw, a member with a length in [lo, hi], or None (a rejected draw)."""


def _geometric_length(rng: np.random.Generator, lo: int, hi: int) -> int:
    """The reference sampler's length: each step stops with probability 1 / (1 + L), L = floor((lo + hi) / 2),
    and generation stops at ``hi`` (so a geometric length capped at hi)."""
    mean = (lo + hi) // 2
    return min(int(rng.geometric(1.0 / (1 + mean))) - 1, hi)


def _bits(rng: np.random.Generator, n: int) -> str:
    return "".join("01"[b] for b in rng.integers(0, 2, size=n))


def parity_sampler(rng: np.random.Generator, lo: int, hi: int) -> str | None:
    s = _bits(rng, _geometric_length(rng, lo, hi))
    if not lo <= len(s) <= hi:
        return None
    if s.count("1") % 2:  # the reference repair: append a '1', keep only if it still fits
        s += "1"
        if len(s) > hi:
            return None
    return s


def rejection_sampler(dfa: DFA) -> Sampler:
    """The geometric sampler with non-members rejected (Tomita 5 and 6)."""

    def sample(rng: np.random.Generator, lo: int, hi: int) -> str | None:
        s = _bits(rng, _geometric_length(rng, lo, hi))
        return s if lo <= len(s) <= hi and dfa.accepts(s) else None

    return sample


def tomita3_sampler(rng: np.random.Generator, lo: int, hi: int) -> str | None:
    """The reference run sampler (fact sheet Sec. 2): length uniform in [lo, hi], then runs of a
    uniformly chosen symbol with a length uniform in [0, remaining]; the 0-run after an odd 1-run is
    kept even in total (a draw of the same symbol extends the current run)."""
    length = int(rng.integers(lo, hi + 1))
    out: list[str] = []
    last, run, ones_before = "", 0, 0  # current run's symbol and length; the 1-run before a 0-run
    while len(out) < length:
        remaining = length - len(out)
        symbol = "01"[int(rng.integers(0, 2))]
        if symbol == "0" and (ones_before if last == "0" else run if last == "1" else 0) % 2:
            already = run if last == "0" else 0
            # even total: add an amount of the current run's parity, uniform among those that fit
            choices = list(range(already % 2, remaining + 1, 2))
            n = choices[int(rng.integers(0, len(choices)))]
        else:
            n = int(rng.integers(0, remaining + 1))
        if n == 0:
            continue
        if symbol != last:
            ones_before = run if last == "1" else ones_before if symbol == "0" else 0
            last, run = symbol, 0
        run += n
        out.extend(symbol * n)
    return "".join(out)


@dataclass(frozen=True)
class DyckSampler:
    """Our D_n sampler (module docstring): an even length uniform over the window, then a member of that
    length that reaches depth n, exactly uniformly (a random walk on the depth weighted by counts)."""

    n: int

    def completions(self, steps: int) -> np.ndarray:
        """``c[k, d, r]``: walks of k more steps from depth d that stay in [0, n], end at 0 and have
        reached depth n (r = 1: already reached). Floats: the counts reach ~1e60 at 200 steps."""
        n = self.n
        c = np.zeros((steps + 1, n + 2, 2))  # depth n + 1 is a zero row for the walk above n
        c[0, 0, 1] = 1.0
        for k in range(1, steps + 1):
            for d in range(n + 1):
                for r in (0, 1):
                    up = c[k - 1, d + 1, 1 if d + 1 == n else r] if d < n else 0.0
                    down = c[k - 1, d - 1, r] if d > 0 else 0.0
                    c[k, d, r] = up + down
        return c

    def __call__(self, rng: np.random.Generator, lo: int, hi: int) -> str | None:
        table = self._table(hi)
        lengths = _dyck_lengths(self.n, lo, hi)
        if not lengths:
            return None
        length = lengths[int(rng.integers(0, len(lengths)))]
        u = rng.random(length)
        d, r, out = 0, int(self.n == 0), []
        for i in range(length):
            left = length - i - 1
            up = table[left, d + 1, 1 if d + 1 == self.n else r] if d < self.n else 0.0
            down = table[left, d - 1, r] if d > 0 else 0.0
            if u[i] * (up + down) < up:
                d, r = d + 1, r | int(d + 1 == self.n)
                out.append("a")
            else:
                d -= 1
                out.append("b")
        return "".join(out)

    def _table(self, steps: int) -> np.ndarray:
        return _dyck_completions(self.n, steps)

    def count_by_length(self, max_len: int) -> list[int]:
        """Members of each length 0..max_len that reach depth n (what this sampler can draw)."""
        table = self._table(max_len)
        return [int(round(table[m, 0, int(self.n == 0)])) for m in range(max_len + 1)]


@lru_cache(maxsize=32)
def _dyck_completions(n: int, steps: int) -> np.ndarray:
    return DyckSampler(n).completions(steps)


@lru_cache(maxsize=32)
def _dyck_lengths(n: int, lo: int, hi: int) -> tuple[int, ...]:
    """The lengths in [lo, hi] that have a member reaching depth n."""
    table = _dyck_completions(n, hi)
    return tuple(m for m in range(lo, hi + 1) if table[m, 0, int(n == 0)] > 0)


# --------------------------------------------------------------------------------------- languages


@dataclass(frozen=True)
class Window:
    lo: int
    hi: int


@dataclass(frozen=True)
class Language:
    name: str
    paper_name: str
    """The row in the RSA paper's Table 2 (as in ``rsa_table2_regular_languages.csv``)."""
    dfa: DFA
    target_rule: str
    sampler: Sampler
    train_size: int
    """The paper's sizes (App. E.2): 10K train and 2K per bin for Parity/Tomita, 5K and 1K for D_n."""
    test_size: int
    train_window: tuple[int, int]
    """The paper's length windows: [2, 50] and [51, 100] for Parity/Tomita, [2, 100] and [101, 200] for D_n."""
    bin1_window: tuple[int, int]

    @cached_property
    def targets_by_state(self) -> np.ndarray:
        return target_table(self.dfa, self.target_rule)

    def count_by_length(self, max_len: int) -> list[int]:
        """Members of each length that the sampler can produce."""
        if isinstance(self.sampler, DyckSampler):
            return self.sampler.count_by_length(max_len)
        return self.dfa.count_by_length(max_len)

    def encode(self, string: str) -> np.ndarray:
        """Input ids (1 and 2 in alphabet order; 0 is padding)."""
        index = {c: i + 1 for i, c in enumerate(self.dfa.alphabet)}
        return np.asarray([index[c] for c in string], dtype=np.int64)

    def targets(self, string: str) -> np.ndarray:
        """``[len(string), 2]`` target units after each prefix."""
        return self.targets_by_state[self.dfa.states(string)]


_BINARY = {"train_size": 10_000, "test_size": 2_000, "train_window": (2, 50), "bin1_window": (51, 100)}
_DYCK = {"train_size": 5_000, "test_size": 1_000, "train_window": (2, 100), "bin1_window": (101, 200)}

LANGUAGES: dict[str, Language] = {
    "parity": Language("parity", "Parity", _parity(), "membership", parity_sampler, **_BINARY),
    "tomita3": Language("tomita3", "Tomita3", _tomita3(), "next_in_language", tomita3_sampler, **_BINARY),
    "tomita5": Language("tomita5", "Tomita5", _tomita5(), "membership", rejection_sampler(_tomita5()), **_BINARY),
    "tomita6": Language("tomita6", "Tomita6", _tomita6(), "membership", rejection_sampler(_tomita6()), **_BINARY),
    "d2": Language("d2", "D2", _dyck(2), "next_live", DyckSampler(2), **_DYCK),
    "d4": Language("d4", "D4", _dyck(4), "next_live", DyckSampler(4), **_DYCK),
}
"""Name -> language, in the order of the paper's Table 2 rows as this project lists them."""


# ------------------------------------------------------------------------------------------ datasets


@dataclass(frozen=True)
class LangDataSpec:
    """The settings a dataset is generated from (each one part of its cache key and digest)."""

    language: str
    train_size: int
    test_size: int
    """Strings in bin 0 and in bin 1 each."""
    train_window: tuple[int, int]
    """Inclusive length window of train and bin 0."""
    bin1_window: tuple[int, int]
    """Inclusive length window of bin 1 (the longer test strings)."""
    seed: int = 0

    @classmethod
    def paper(cls, language: str, seed: int = 0) -> LangDataSpec:
        """The paper's sizes and windows for ``language`` (App. E.2)."""
        lang = get_language(language)
        return cls(language, lang.train_size, lang.test_size, lang.train_window, lang.bin1_window, seed)

    def check(self, where: str = "") -> None:
        """A :class:`ConfigError` naming the culprit for an unknown language, a size below 1, an empty
        or inverted window, more strings asked of a window than it holds, or a bin 1 that is not longer
        than the training strings."""
        prefix = f"{where}: " if where else ""
        lang = get_language(self.language, where)
        for name in ("train_size", "test_size", "seed"):
            value = getattr(self, name)
            minimum = 0 if name == "seed" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"{prefix}{name}: must be an integer >= {minimum}, got {value!r}")
        counts: list[int] = []
        for name, size in (("train_window", self.train_size + self.test_size), ("bin1_window", self.test_size)):
            window = getattr(self, name)
            if len(window) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in window):
                raise ConfigError(f"{prefix}{name}: expected two integer lengths [lo, hi], got {list(window)!r}")
            lo, hi = window
            if lo < 1:
                raise ConfigError(f"{prefix}{name}: the shortest length must be at least 1, got [{lo}, {hi}]")
            if lo > hi:
                raise ConfigError(f"{prefix}{name}: the window [{lo}, {hi}] is inverted (lo > hi)")
            if len(counts) <= hi:
                counts = lang.count_by_length(hi)
            held = sum(counts[lo : hi + 1])
            if held == 0:
                raise ConfigError(f"{prefix}{name}: no string of {self.language} has a length in [{lo}, {hi}]")
            if held < size:
                what = "train + bin 0" if name == "train_window" else "bin 1"
                raise ConfigError(
                    f"{prefix}{name}: [{lo}, {hi}] holds {held} distinct strings of {self.language}, fewer than "
                    f"the {size} that {what} need"
                )
        if self.bin1_window[0] <= self.train_window[1]:  # bin 1 tests longer strings than any trained on
            raise ConfigError(
                f"{prefix}bin1_window: bin 1 holds the strings longer than training's, so it must start above "
                f"train_window's longest length {self.train_window[1]}, got {list(self.bin1_window)}")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "train_window": list(self.train_window), "bin1_window": list(self.bin1_window)}

    @property
    def key(self) -> str:
        """Digest of the settings and the generator version: the cache file's name."""
        text = json.dumps({"settings": self.as_dict(), "generator": GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def get_language(name: str, where: str = "") -> Language:
    if name not in LANGUAGES:
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}unknown language {name!r}; known: {', '.join(LANGUAGES)}")
    return LANGUAGES[name]


@dataclass(frozen=True)
class LangDataset:
    spec: LangDataSpec
    splits: dict[str, tuple[str, ...]]
    """``train``, ``bin0``, ``bin1``: the strings, in draw order."""
    digest: str = field(default="")
    """sha256 of the settings, the generator version and the strings (:func:`content_digest`)."""

    @property
    def language(self) -> Language:
        return LANGUAGES[self.spec.language]


def content_digest(spec: LangDataSpec, splits: dict[str, Sequence[str]]) -> str:
    text = json.dumps({"settings": spec.as_dict(), "generator": GENERATOR_VERSION,
                       "splits": {k: list(splits[k]) for k in SPLITS}}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _draw_distinct(
    sampler: Sampler, rng: np.random.Generator, lo: int, hi: int, n: int, exclude: set[str], what: str
) -> list[str]:
    """``n`` distinct strings not in ``exclude``, in draw order; a DataError if the sampler keeps
    repeating itself (the window holds enough strings, :meth:`LangDataSpec.check`, but the sampler may
    reach some of them too rarely)."""
    out: list[str] = []
    seen = set(exclude)
    budget = 200 * n + 100_000
    for _ in range(budget):
        s = sampler(rng, lo, hi)
        if s is not None and s not in seen:
            seen.add(s)
            out.append(s)
            if len(out) == n:
                return out
    raise DataError(f"{what}: only {len(out)} distinct strings of [{lo}, {hi}] in {budget} draws, {n} needed")


def generate(spec: LangDataSpec) -> LangDataset:
    """Draw the dataset of ``spec`` (checked first); the same settings give the same strings."""
    spec.check()
    lang = LANGUAGES[spec.language]
    pool_seq, bin1_seq = np.random.SeedSequence(spec.seed).spawn(2)
    lo, hi = spec.train_window
    pool = _draw_distinct(lang.sampler, np.random.default_rng(pool_seq), lo, hi, spec.train_size + spec.test_size,
                          set(), f"{spec.language} train + bin 0")
    lo, hi = spec.bin1_window
    bin1 = _draw_distinct(lang.sampler, np.random.default_rng(bin1_seq), lo, hi, spec.test_size, set(pool),
                          f"{spec.language} bin 1")
    splits = {"train": tuple(pool[: spec.train_size]), "bin0": tuple(pool[spec.train_size :]), "bin1": tuple(bin1)}
    return LangDataset(spec, splits, content_digest(spec, splits))


def langs_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$XDG_CACHE_HOME/recurbench/langs`` (default ``~/.cache/recurbench/langs``)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "recurbench" / "langs"


def load_dataset(spec: LangDataSpec, cache_dir: str | os.PathLike[str] | None = None) -> LangDataset:
    """The dataset of ``spec`` from the cache, else generated and written there. A cached file whose
    content does not match its digest (or its settings) is generated again and replaced."""
    spec.check()
    folder = langs_cache_dir(cache_dir)
    path = folder / f"{spec.language}-{spec.key[:20]}.json"
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            splits = {k: tuple(raw["splits"][k]) for k in SPLITS}
            if raw.get("settings") == spec.as_dict() and raw.get("digest") == content_digest(spec, splits):
                return LangDataset(spec, splits, raw["digest"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable or stale: generated again below
    data = generate(spec)
    folder.mkdir(parents=True, exist_ok=True)
    payload = {"settings": spec.as_dict(), "generator": GENERATOR_VERSION, "digest": data.digest,
               "splits": {k: list(v) for k, v in data.splits.items()}}
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return data
