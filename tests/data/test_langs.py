"""The regular-language datasets: membership and targets against oracles written here from the
languages' definitions (fact sheet Sec. 1 and 3, not the DFAs of recurbench.data.langs), length
windows, distinct strings across splits, determinism, the cache and its digest, and bad settings."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

from recurbench.data import langs
from recurbench.data.langs import LANGUAGES, LangDataSpec, generate, load_dataset
from recurbench.errors import ConfigError

# ------------------------------------------------------------------------------------------ oracles


def tomita3_member(s: str) -> bool:
    """No maximal odd 1-run directly followed by an odd 0-run (a maximal 0-run is always completed:
    a 1 or the end follows it)."""
    runs = re.findall(r"1+|0+", s)
    return not any(
        a[0] == "1" and len(a) % 2 and b[0] == "0" and len(b) % 2 for a, b in zip(runs, runs[1:], strict=False)
    )


def dyck_depths(s: str) -> list[int]:
    depth, out = 0, []
    for ch in s:
        depth += 1 if ch == "a" else -1
        out.append(depth)
    return out


def dyck_member(s: str, n: int) -> bool:
    depths = dyck_depths(s)
    return all(0 <= d <= n for d in depths) and (not depths or depths[-1] == 0)


MEMBER = {
    "parity": lambda s: s.count("1") % 2 == 0,
    "tomita3": tomita3_member,
    "tomita5": lambda s: s.count("0") % 2 == 0 and s.count("1") % 2 == 0,
    "tomita6": lambda s: (s.count("0") - s.count("1")) % 3 == 0,
    "d2": lambda s: dyck_member(s, 2),
    "d4": lambda s: dyck_member(s, 4),
}


def oracle_targets(language: str, s: str) -> list[list[float]]:
    """Fact sheet Sec. 3: membership one-hot (Parity, T5, T6), next symbol in L (T3), (a, b) allowed by depth (D_n)."""
    out = []
    for i in range(1, len(s) + 1):
        prefix = s[:i]
        if language in ("parity", "tomita5", "tomita6"):
            out.append([0.0, 1.0] if MEMBER[language](prefix) else [1.0, 0.0])
        elif language == "tomita3":
            out.append([float(tomita3_member(prefix + "0")), float(tomita3_member(prefix + "1"))])
        else:
            n, d = int(language[1:]), dyck_depths(prefix)[-1]
            out.append([float(d < n), float(d > 0)])
    return out


def small(language: str, seed: int = 0, train: int = 300, test: int = 100) -> LangDataSpec:
    lang = LANGUAGES[language]
    return LangDataSpec(language, train, test, lang.train_window, lang.bin1_window, seed)


@pytest.fixture(scope="module")
def datasets():
    return {name: generate(small(name)) for name in LANGUAGES}


# -------------------------------------------------------------------------------------------- tests


def test_paper_settings_are_app_e2s():
    assert LangDataSpec.paper("parity") == LangDataSpec("parity", 10_000, 2_000, (2, 50), (51, 100), 0)
    assert LangDataSpec.paper("tomita6").train_window == (2, 50)
    assert LangDataSpec.paper("d4") == LangDataSpec("d4", 5_000, 1_000, (2, 100), (101, 200), 0)


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_every_string_is_a_member_within_its_window(datasets, language):
    data = datasets[language]
    windows = {"train": data.spec.train_window, "bin0": data.spec.train_window, "bin1": data.spec.bin1_window}
    for split, strings in data.splits.items():
        lo, hi = windows[split]
        assert all(lo <= len(s) <= hi for s in strings), split
        bad = [s for s in strings if not MEMBER[language](s)]
        assert not bad, (split, bad[:3])
        assert set("".join(strings)) <= set(LANGUAGES[language].dfa.alphabet)


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_no_string_twice_within_or_across_splits(datasets, language):
    splits = datasets[language].splits
    assert [len(splits[k]) for k in ("train", "bin0", "bin1")] == [300, 100, 100]
    every = [s for strings in splits.values() for s in strings]
    assert len(every) == len(set(every))


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_targets_agree_with_the_oracle(datasets, language):
    lang = LANGUAGES[language]
    for s in datasets[language].splits["bin0"][:40] + datasets[language].splits["bin1"][:10]:
        np.testing.assert_array_equal(lang.targets(s), np.asarray(oracle_targets(language, s), dtype=np.float32))


@pytest.mark.parametrize(
    ("language", "string", "targets"),
    [
        # Fact sheet Sec. 3: after "1", '0' is flagged as not allowed although "100" is a member.
        ("tomita3", "100", [[0, 1], [1, 0], [0, 1]]),
        ("tomita3", "0110", [[1, 1], [0, 1], [1, 1], [1, 1]]),  # "010" is not in L
        ("parity", "0110", [[0, 1], [1, 0], [0, 1], [0, 1]]),
        ("tomita5", "0101", [[1, 0], [1, 0], [1, 0], [0, 1]]),
        ("tomita6", "0011", [[1, 0], [1, 0], [1, 0], [0, 1]]),
        ("d2", "aabbab", [[1, 1], [0, 1], [1, 1], [1, 0], [1, 1], [1, 0]]),
        ("d4", "aaaabbbb", [[1, 1], [1, 1], [1, 1], [0, 1], [1, 1], [1, 1], [1, 1], [1, 0]]),
    ],
)
def test_hand_worked_targets(language, string, targets):
    assert MEMBER[language](string)
    np.testing.assert_array_equal(LANGUAGES[language].targets(string), np.asarray(targets, dtype=np.float32))
    assert LANGUAGES[language].encode(string).tolist() == [LANGUAGES[language].dfa.alphabet.index(c) + 1 for c in string]


@pytest.mark.parametrize("language", ["parity", "tomita3", "tomita5", "tomita6"])
def test_member_counts_match_enumeration(language):
    counts = LANGUAGES[language].count_by_length(10)
    for n in range(11):
        assert counts[n] == sum(MEMBER[language]("".join(t)) for t in itertools.product("01", repeat=n)), n


@pytest.mark.parametrize("n", [2, 4])
def test_dyck_sampler_draws_members_that_reach_depth_n_over_the_whole_window(n):
    counts = LANGUAGES[f"d{n}"].count_by_length(12)
    for length in range(13):  # the sampler's support: members of that length reaching depth n
        reach = sum(dyck_member(w := "".join(t), n) and max(dyck_depths(w), default=0) == n
                    for t in itertools.product("ab", repeat=length))
        assert counts[length] == reach, length
    data = generate(LangDataSpec(f"d{n}", 2000, 200, (2, 100), (101, 200), 0))
    assert all(max(dyck_depths(s)) == n for split in data.splits.values() for s in split)
    lengths = np.asarray([len(s) for s in data.splits["train"]])
    # Lengths spread over the window (uniform over the even lengths, less the saturated short ones).
    assert lengths.min() <= 2 * n + 10 and lengths.max() >= 96 and 45 <= lengths.mean() <= 65


def test_dyck_sampler_is_uniform_within_a_length():
    sampler = langs.DyckSampler(2)
    rng = np.random.default_rng(1)
    draws = [sampler(rng, 8, 8) for _ in range(7000)]
    counts = {s: draws.count(s) for s in set(draws)}
    # D_2 has 2^3 strings of length 8 (compositions of 4 into blocks a(ab)^k b); all but (ab)^4 reach depth 2.
    assert len(counts) == LANGUAGES["d2"].count_by_length(8)[8] == 7
    assert max(counts.values()) / min(counts.values()) < 1.2  # ~1000 each


def test_generation_is_deterministic_in_the_seed():
    a, b, c = generate(small("tomita5")), generate(small("tomita5")), generate(small("tomita5", seed=1))
    assert a.splits == b.splits and a.digest == b.digest
    assert a.splits["train"] != c.splits["train"] and a.digest != c.digest
    assert a.digest == langs.content_digest(a.spec, a.splits)


def test_dataset_is_cached_under_its_settings_and_digest_checked(tmp_path, monkeypatch):
    spec = small("parity")
    first = load_dataset(spec, tmp_path)
    (path,) = tmp_path.glob("parity-*.json")
    assert json.loads(path.read_text())["digest"] == first.digest

    def no_generation(_spec):
        raise AssertionError("read from the cache, not generated")

    with monkeypatch.context() as m:
        m.setattr(langs, "generate", no_generation)
        assert load_dataset(spec, tmp_path).splits == first.splits
    raw = json.loads(path.read_text())
    raw["splits"]["train"][0] = "1111"  # tampered: the digest no longer matches, so it is made again
    path.write_text(json.dumps(raw))
    again = load_dataset(spec, tmp_path)
    assert again.splits == first.splits and json.loads(path.read_text())["digest"] == first.digest
    load_dataset(small("parity", seed=1), tmp_path)
    assert len(list(tmp_path.glob("parity-*.json"))) == 2  # other settings, another file


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (LangDataSpec("tomita4", 10, 10, (2, 50), (51, 100)), r"unknown language 'tomita4'; known: parity, tomita3"),
        (LangDataSpec("parity", 10, 10, (50, 2), (51, 100)), r"train_window: the window \[50, 2\] is inverted"),
        (LangDataSpec("d2", 10, 10, (2, 100), (3, 3)), r"bin1_window: no string of d2 has a length in \[3, 3\]"),
        (LangDataSpec("d4", 10, 10, (2, 6), (101, 200)), r"train_window: no string of d4 has a length in \[2, 6\]"),
        (LangDataSpec("parity", 10, 10, (0, 50), (51, 100)), r"train_window: the shortest length must be at least 1"),
        (LangDataSpec("parity", 10, 5, (2, 4), (51, 100)),
         r"train_window: \[2, 4\] holds 14 distinct strings of parity, fewer than the 15 that train \+ bin 0 need"),
        (LangDataSpec("parity", 0, 10, (2, 50), (51, 100)), r"train_size: must be an integer >= 1, got 0"),
        # Bin 1 measures generalisation to longer strings: these trained and reported a "bin 1" that was not.
        (LangDataSpec("parity", 10, 10, (2, 50), (10, 20)), r"bin1_window: bin 1 holds the strings longer than "
                                                            r"training's, so it must start above train_window's "
                                                            r"longest length 50, got \[10, 20\]"),
        (LangDataSpec("parity", 10, 10, (2, 50), (50, 100)), r"bin1_window: .* longest length 50, got \[50, 100\]"),
    ],
)
def test_bad_settings_name_the_culprit(tmp_path, spec, message):
    with pytest.raises(ConfigError, match=message):
        load_dataset(spec, tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written
