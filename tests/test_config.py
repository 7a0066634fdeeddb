"""Reading YAML as a person writes it (:func:`recurbench.config.load_yaml_text`)."""

from __future__ import annotations

import pytest
import yaml

from recurbench.config import load_yaml_text, parse_overrides, read_yaml
from recurbench.errors import ConfigError
from recurbench.suites.registry import SUITES, load_profile


@pytest.mark.parametrize(
    ("text", "value"),
    # A whole number in exponent form (no point, no negative exponent) is an int: `training.updates=2e5`.
    [("1e-3", 0.001), ("2E5", 200000), ("-1e+2", -100), ("1.5e3", 1500.0), (".5e-1", 0.05), ("3", 3),
     ("0.5", 0.5), ("'1e-3'", "1e-3"), ("1e", "1e"), ("e5", "e5"), ("1_000", 1000), ("1e30", 10**30),
     ("2.0e5", 200000.0), ("5e0", 5)],
)
def test_a_number_in_exponent_form_is_a_number(text, value):
    # YAML 1.1 (PyYAML) reads 1e-3 as the string '1e-3': a profile's `learning_rate: 1e-3` was refused
    # as "Input should be a valid number", while --set read it as a number.
    got = load_yaml_text(f"v: {text}")["v"]
    assert got == value and type(got) is type(value)
    assert parse_overrides([f"v={text}"])["v"] == value


def test_a_count_in_exponent_form_is_taken_and_a_rate_stays_a_float():
    _, profile = load_profile("memory", "table5", overrides=["training.updates=2e5", "training.learning_rate=1e0"])
    assert profile.training.updates == 200000 and type(profile.training.learning_rate) is float


def test_a_suite_file_may_write_a_rate_in_exponent_form(tmp_path):
    shipped = read_yaml(SUITES["memory"]().suite_path())
    quick = shipped["profiles"]["quick"]
    path = tmp_path / "memory.yaml"
    text = yaml.safe_dump({"suite": "memory", "profiles": {"quick": {**quick, "training": {**quick["training"]}}}})
    text = text.replace("learning_rate: 0.001", "learning_rate: 1e-3")
    assert "learning_rate: 1e-3" in text
    path.write_text(text)
    _, profile = load_profile("memory", "quick", path)
    assert profile.training.learning_rate == 0.001


def test_a_key_given_twice_names_both_lines_but_merged_keys_may_be_given_again():
    with pytest.raises(yaml.YAMLError, match=r"duplicate key 'b' \(first given on line 2\)\n  in .*, line 4"):
        load_yaml_text("a:\n  b: 1\n  c: 2\n  b: 3\n")
    # `<<:` merges a block; a key given after it changes what was merged (the shipped profiles do this).
    assert load_yaml_text("x: &x {a: 1, b: 2}\ny:\n  <<: *x\n  a: 5\n") == {"x": {"a": 1, "b": 2}, "y": {"a": 5, "b": 2}}


def test_a_bad_file_is_one_error_naming_it(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("suite: memory\nsuite: ltsf\n")
    with pytest.raises(ConfigError, match=rf"^{path}: invalid YAML: line 2, column 1: duplicate key 'suite' \(first given on line 1\)"):
        read_yaml(path)


def test_a_yaml_syntax_error_is_one_line_naming_the_place(tmp_path):
    # PyYAML's own text ran over four lines and named the file `"<unicode string>"`.
    path = tmp_path / "broken.yaml"
    path.write_text("a: 1\n  b: [\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert str(info.value) == f"{path}: invalid YAML: line 2, column 4: mapping values are not allowed here"
    with pytest.raises(ConfigError) as info:
        parse_overrides(["model.nonlinearity=[red"])
    assert str(info.value) == ("--set 'model.nonlinearity=[red': cannot read the value as YAML: while parsing a flow "
                               "sequence; expected ',' or ']', but got '<stream end>'")


def test_a_file_that_is_not_utf8_is_one_line_naming_the_byte(tmp_path):
    path = tmp_path / "garbage.yaml"
    path.write_bytes(b"suite: memory\nseeds: [1, 2]\nname: caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert str(info.value) == (
        f"{path}: line 3: not UTF-8 text (byte 0xe9 at offset 37: invalid continuation byte)"
    )


def test_random_bytes_are_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "garbage.yaml"
    path.write_bytes(b"\xad" + bytes(range(256)) * 8)
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert str(info.value) == f"{path}: line 1: not UTF-8 text (byte 0xad at offset 0: invalid start byte)"


def test_a_directory_is_not_a_config_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_yaml(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory, not a config file"
    with pytest.raises(ConfigError) as info:
        read_yaml(tmp_path / "missing.yaml")
    assert str(info.value) == f"{tmp_path / 'missing.yaml'}: no such config file"


def test_a_value_that_fits_no_member_of_a_union_is_one_line():
    # Two lines under pydantic's names for the members ("memory_window.constrained-int: ...",
    # "memory_window.literal['episode']: ...").
    with pytest.raises(ConfigError) as info:
        load_profile("minigrid", "quick", overrides=["core.memory_window=0"])
    assert str(info.value) == (
        "--set core.memory_window=0: Input should be greater than or equal to 1 or input should be 'episode' (got 0)")
