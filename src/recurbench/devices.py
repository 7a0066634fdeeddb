"""Where work runs: ``--device`` for ``run``, ``tune`` and the ``bench`` commands, ``device`` for the
sktime estimators.

Accepted: ``auto`` (the first CUDA GPU when one is visible, else the CPU), ``cpu``, ``cuda``, ``cuda:N``,
and ``mps`` on Apple silicon. A device this machine cannot provide is refused before anything trains, with
the reason (torch built without CUDA, no GPU visible, an index past the last GPU).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from recurbench.errors import ConfigError

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"

_CUDA = re.compile(r"cuda(?::(\d+))?")


def resolve_device(spec: str | torch.device, *, what: str = "device") -> torch.device:
    """``spec`` as a :class:`torch.device` this machine has; ``what`` names the setting in the error
    (``--device``, ``InformerForecaster: device``)."""
    import torch  # noqa: PLC0415 - torch: the CLI imports this at start-up, --help must not wait

    text = str(spec).strip().lower()
    if text == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if text == "cpu":
        return torch.device("cpu")
    if text == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ConfigError(f"{what}: 'mps' is not available on this machine (it needs Apple silicon)")
        return torch.device("mps")
    match = _CUDA.fullmatch(text)
    if match is None:
        raise ConfigError(f"{what}: unknown device {str(spec)!r}; expected {DEVICE_CHOICES}")
    if not torch.cuda.is_available():
        reason = ("this torch was built without CUDA" if torch.version.cuda is None
                  else "no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES and the driver)")
        raise ConfigError(f"{what}: {str(spec)!r} asks for a GPU, but {reason} (torch {torch.__version__}); "
                          "use 'cpu' or 'auto'")
    index = int(match.group(1) or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(
            f"{what}: {str(spec)!r} does not exist: this machine has {count} CUDA device(s), "
            f"cuda:0..cuda:{count - 1}"
        )
    return torch.device("cuda", index)


def describe_device(device: torch.device) -> str:
    """``cpu``, or ``cuda:0 (NVIDIA H100 80GB HBM3)``: what the ``device`` tag of a run records."""
    import torch  # noqa: PLC0415 - torch: the CLI imports this at start-up, --help must not wait

    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return device.type


def rng_devices(device: torch.device) -> list[int]:
    """The CUDA devices whose random state :func:`torch.random.fork_rng` must save and restore for work on
    ``device`` (none for the CPU)."""
    import torch  # noqa: PLC0415 - torch: the CLI imports this at start-up, --help must not wait

    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a no-op on the CPU), so that a wall-clock time is complete."""
    import torch  # noqa: PLC0415 - torch: the CLI imports this at start-up, --help must not wait

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
