"""Every Triton kernel, compiled ahead of time for sm_80 and sm_90 without a GPU (in the ordinary pytest
process; the kernels' numerics are tested under the interpreter and on a GPU elsewhere).

All the specialisations the launch code makes for :func:`recurbench.bench.kernels.workloads` must
compile, none that is launched by default may spill registers, and none may need more shared memory
per block than the architecture has. The first run compiles about a hundred kernels (a minute or so
on 2 cores); Triton's disk cache makes later runs fast."""

from __future__ import annotations

import importlib
import os
import pkgutil

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("TRITON_INTERPRET=1: the kernels are interpreter objects; compiled in the ordinary process",
                allow_module_level=True)
triton = pytest.importorskip("triton")

from recurbench.bench.kernels import kernel_table, workloads  # noqa: E402
from recurbench.kernels import compile as kc  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION")
ARCHS = (80, 90)


@pytest.fixture(scope="module")
def rows() -> list[kc.KernelResources]:
    try:
        kc.check_available()
    except kc.KernelCompileUnavailable as exc:
        pytest.skip(str(exc))
    return kernel_table(ARCHS)


def _describe(r: kc.KernelResources) -> str:
    return f"{r.kernel} [{r.configuration}] sm_{r.arch} (used by {r.workloads[0]}, ...)"


def _launched_kernels() -> set[str]:
    """The @triton.jit functions of recurbench.kernels that no other jit function calls: the kernels."""
    import recurbench.kernels

    jitted = {}
    for info in pkgutil.walk_packages(recurbench.kernels.__path__, "recurbench.kernels."):
        if info.name.endswith(".triton"):
            module = importlib.import_module(info.name)
            jitted.update({name: fn for name, fn in vars(module).items()
                           if isinstance(fn, triton.runtime.jit.JITFunction)})
    return {name for name in jitted if not any(f"{name}(" in fn.src for other, fn in jitted.items() if other != name)}


def test_every_kernel_compiles_in_every_configuration_for_both_architectures(rows):
    failed = [f"{_describe(r)}: {r.error}" for r in rows if r.error]
    assert not failed, "\n".join(failed)
    assert {r.kernel for r in rows} == _launched_kernels() == {"_rem_fwd_kernel", "_rem_dparam_kernel",
                                                                 "_memattn_step_kernel"}
    for kernel in {r.kernel for r in rows}:
        assert {r.arch for r in rows if r.kernel == kernel} == set(ARCHS), kernel


def test_no_default_configuration_spills_registers(rows):
    spilled = [f"{_describe(r)}: {r.spill_bytes} bytes of stack, {r.registers} registers"
               for r in rows if r.default and r.spill_bytes]
    assert not spilled, "\n".join(spilled)


def test_every_configuration_fits_the_shared_memory_of_a_block(rows):
    over = [f"{_describe(r)}: {r.shared_bytes} bytes > {kc.ARCHS[r.arch].shared_per_block}"
            for r in rows if r.shared_bytes > kc.ARCHS[r.arch].shared_per_block]
    assert not over, "\n".join(over)
    assert all(r.registers <= 255 and 0 < r.occupancy <= 1 for r in rows)


def test_the_shipped_shapes_and_the_kernel_cases_are_all_compiled(rows):
    used = {name for r in rows for name in r.workloads}
    assert used == {w.name for w in workloads()}
    # the paper's RSA-Informer (d_model 512, 8 heads of 64) runs the default geometry: C = 32, BD = 64, 8 warps
    paper = [r for r in rows if "ltsf paper ETTh1-24 rsa_informer encoder" in r.workloads]
    assert {r.kernel for r in paper} == {"_rem_fwd_kernel", "_rem_dparam_kernel"}
    assert all(r.configuration.startswith("C=32 BD=64 ") and " w8" in r.configuration and r.default for r in paper)
    assert not all(r.default for r in rows)  # chunk_size=64 is compiled too, as a non-default configuration


def test_occupancy_estimate_follows_the_limiting_resource():
    sm80, sm90 = kc.ARCHS[80], kc.ARCHS[90]
    # 32 registers, 4 warps, no shared memory: 16 blocks of 4 warps fill the SM's 64 warp slots.
    assert kc.occupancy(sm80, 32, 0, 4) == 1.0
    # 255 registers round up to 256 x 32 = 8192 per warp: 8 warps fit in 65536 registers.
    assert kc.occupancy(sm80, 255, 0, 4) == 8 / 64
    # 100 KiB per block (+ 1 KiB reserved): one block on sm_80 (164 KiB), two on sm_90 (228 KiB).
    assert kc.occupancy(sm80, 32, 100 * 1024, 4) == 4 / 64
    assert kc.occupancy(sm90, 32, 100 * 1024, 4) == 8 / 64
    # Tiny blocks: at most 32 blocks per SM, so 1-warp blocks reach half the warp slots.
    assert kc.occupancy(sm90, 16, 0, 1) == 32 / 64
