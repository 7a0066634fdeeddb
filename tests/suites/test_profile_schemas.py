"""A suite's profile schema (pydantic, what a profile file may say) mirrors the config dataclass its
runs are built from: the same settings with the same defaults, so that a setting a profile leaves out
means what the config's own default means, and a default changed in one place is not silently kept
in the other. Each pair names the config's fields the schema leaves to the suite on purpose."""

from __future__ import annotations

import dataclasses

import pytest

from recurbench.langs.models import LangModelConfig
from recurbench.langs.training import LangTrainConfig
from recurbench.memory.models import SequenceModelConfig
from recurbench.memory.tasks import MemoryTask
from recurbench.memory.training import MemoryTrainConfig
from recurbench.suites import langs, memory

REQUIRED = object()

PAIRS = [  # schema, config, the config's fields the suite fills itself, the schema's required fields
    (memory.ModelSettings, SequenceModelConfig, {"core", "core_settings"}, set()),  # models, plugin_settings
    (memory.TrainingSettings, MemoryTrainConfig, set(), {"updates"}),  # a profile must give its budget
    (memory.TaskSettings, MemoryTask, {"T"}, set()),  # lengths
    (langs.LangModelSettings, LangModelConfig, {"rem_k"}, set()),  # rem_heads
    (langs.LangTrainingSettings, LangTrainConfig, set(), set()),
]


def _config_defaults(config: type) -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(config):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = REQUIRED
    return out


@pytest.mark.parametrize(("schema", "config", "filled", "required"), PAIRS, ids=lambda p: getattr(p, "__name__", ""))
def test_a_profile_schema_has_its_configs_settings_and_defaults(schema, config, filled, required):
    ours = {name: REQUIRED if f.is_required() else f.default for name, f in schema.model_fields.items()}
    theirs = _config_defaults(config)
    assert set(ours) == set(theirs) - filled
    assert {name for name, value in ours.items() if value is REQUIRED} == required
    differ = {name: (ours[name], theirs[name]) for name in ours if name not in required and ours[name] != theirs[name]}
    assert differ == {}
