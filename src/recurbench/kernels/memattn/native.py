"""The C++ step loop of :mod:`.sequence` (``sequence_native.cpp``), compiled on first use.

``torch.utils.cpp_extension.load`` builds it with the machine's C++ compiler (about a minute, once;
then cached in PyTorch's extension directory, ``$TORCH_EXTENSIONS_DIR``, and rebuilt only when the
source, the flags or PyTorch change). ``-march=native`` lets the compiler vectorise the per-slot loops
for this CPU, so the build's name carries a digest of the CPU's model and flags, one of the source, and
one of where it is built from (the source file's path, the Python environment, PyTorch's version: they
are in the build's command, which PyTorch compares): a cache shared by machines with different CPUs, or
by two checkouts or environments, holds one build per kind instead of rebuilding one module each time
the other is used (and a process loading the other's). A build announces itself in one line on stderr.

Where no compiler is found, the build fails, or ``RECURBENCH_NATIVE=0`` is set, :func:`native_module` returns ``None``
and the Python loop of the same function runs instead (the same results, about 4.5x slower per step at
batch 10). A build that fails is warned about once, with the compiler's first error; the switch,
being the user's choice, is not.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import sys
import sysconfig
import warnings
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("sequence_native.cpp")
SWITCH = "RECURBENCH_NATIVE"
"""Environment variable: ``0`` turns the native loop off (the Python loop runs)."""


def _cpu_digest() -> str:
    """The CPU's model and feature flags, hashed: what ``-march=native`` compiles for."""
    described = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            described += "".join(line for line in info if line.startswith(("model name", "flags")))
    except OSError:
        described += platform.processor()
    return hashlib.sha256(described.encode()).hexdigest()[:10]


def build_name() -> str:
    """The extension's name: a digest of this CPU (:func:`_cpu_digest`), of the source's bytes, and of
    the rest of what the build's command holds (the source's path, the Python environment, PyTorch)."""
    import torch  # noqa: PLC0415 - the name is needed only where the module is built

    source = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:10]
    where = hashlib.sha256(f"{SOURCE.resolve()}|{sys.prefix}|{torch.__version__}".encode()).hexdigest()[:8]
    return f"recurbench_memattn_{_cpu_digest()}_{source}_{where}"


def _announce_build(name: str) -> None:
    """One line on stderr where the module is not built yet (PyTorch's build folder holds no library)."""
    from torch.utils import cpp_extension  # noqa: PLC0415 - imports setuptools; only on first use

    find = getattr(cpp_extension, "_get_build_directory", None)  # private: where PyTorch builds ``name``
    try:
        folder = Path(find(name, False)) if find is not None else None
    except Exception:  # noqa: BLE001 - only the announcement depends on it
        folder = None
    if folder is not None and not any(folder.glob(f"{name}*.so")) and not any(folder.glob(f"{name}*.pyd")):
        print(f"recurbench: building the attentive cores' C++ step loop in {folder} (once per CPU, checkout and "
              "environment; about a minute)", file=sys.stderr, flush=True)


def native_enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip() != "0"


@functools.cache
def native_module() -> ModuleType | None:
    """The compiled module (``attentive_forward`` / ``_backward``, ``sab_forward`` / ``_backward``), or ``None`` when it is
    switched off or cannot be built (with a warning naming the reason)."""
    if not native_enabled():
        return None
    scripts = sysconfig.get_path("scripts")  # where pip put the `ninja` dependency's executable
    if shutil.which("ninja") is None and scripts and shutil.which("ninja", path=scripts):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")  # an environment not activated
    try:
        from torch.utils.cpp_extension import load  # noqa: PLC0415 - imports setuptools; only on first use

        native = "-march=native" if platform.machine() in ("x86_64", "AMD64") else "-mcpu=native"
        flags = ["-O3", native, "-fopenmp-simd"]  # simd: the dot products' reductions in vector lanes
        name = build_name()
        _announce_build(name)
        return load(name=name, sources=[str(SOURCE)], extra_cflags=flags, verbose=False)
    except Exception as exc:  # noqa: BLE001 - any build failure means: run the Python loop
        warnings.warn(f"recurbench: the attentive cores' C++ step loop could not be built ({build_failure(exc)}); "
                      "the Python loop runs instead (same results, slower). Install a C++ compiler if there is none, "
                      f"or set {SWITCH}=0 to silence this.", RuntimeWarning, stacklevel=2)
        return None


def build_failure(exc: Exception) -> str:
    """Why a build failed, in one line: the compiler's first error where the exception carries the build's
    output (``cpp_extension`` appends it), else the message's last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return errors[0] if errors else lines[-1] if lines else type(exc).__name__


__all__ = ["SOURCE", "SWITCH", "build_failure", "build_name", "native_enabled", "native_module"]
