"""Environments: MiniGrid train/test pairs (train small, test large; Kerg et al. 2020, Table 4)."""

from __future__ import annotations

from dataclasses import dataclass

from recurbench.errors import ConfigError


@dataclass(frozen=True)
class EnvPair:
    """An agent is trained on ``train`` and its generalisation measured on ``test``."""

    name: str
    train: str
    test: str


ENV_PAIRS: dict[str, EnvPair] = {
    pair.name: pair
    for pair in (
        EnvPair("RedBlueDoors", "MiniGrid-RedBlueDoors-6x6-v0", "MiniGrid-RedBlueDoors-8x8-v0"),
        EnvPair("GoToObject", "MiniGrid-GoToObject-6x6-N2-v0", "MiniGrid-GoToObject-8x8-N2-v0"),
        EnvPair("Memory", "MiniGrid-MemoryS7-v0", "MiniGrid-MemoryS13-v0"),
        EnvPair("GoToDoor", "MiniGrid-GoToDoor-5x5-v0", "MiniGrid-GoToDoor-8x8-v0"),
        EnvPair("Fetch", "MiniGrid-Fetch-5x5-N2-v0", "MiniGrid-Fetch-8x8-N3-v0"),
        EnvPair("DoorKey", "MiniGrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-16x16-v0"),
    )
}


def pair_of_ids(train: str, test: str) -> EnvPair:
    """The pair training on ``train`` and testing on ``test``: the shipped one with these ids, else
    one named ``TRAIN:TEST``."""
    for pair in ENV_PAIRS.values():
        if (pair.train, pair.test) == (train, test):
            return pair
    return EnvPair(f"{train}:{test}", train, test)


def parse_pair(text: str, where: str = "--pair") -> EnvPair:
    """``TRAIN_ID:TEST_ID`` (two gymnasium ids) as a pair (:func:`pair_of_ids`); the ids are
    checked against the registry where the env is made."""
    train, sep, test = (part.strip() for part in text.partition(":"))
    if not sep or not train or not test or ":" in test:
        raise ConfigError(
            f"{where} {text!r}: expected TRAIN_ID:TEST_ID, two gymnasium ids joined by one colon, "
            "e.g. MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0"
        )
    return pair_of_ids(train, test)


def registered_env_ids() -> set[str]:
    """MiniGrid ids known to gymnasium in this installation."""
    import gymnasium  # noqa: PLC0415 - gymnasium and minigrid: about a second to import, only to list the registry
    import minigrid  # noqa: F401, PLC0415 - gymnasium and minigrid: about a second to import, only to list the registry; registers the MiniGrid ids

    return {env_id for env_id in gymnasium.registry if env_id.startswith("MiniGrid-")}
