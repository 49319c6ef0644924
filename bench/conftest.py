"""Skips for the benchmarks, decided at collection time, before any fixture compiles a kernel.

``pytest bench/`` on a machine that cannot run a benchmark skips it with a reason naming what is
missing: torch (the vendor baselines are measured through it; the modules ``importorskip`` it when
they are imported), or a Hopper GPU (tests marked ``gpu``): no NVIDIA GPU or driver at all, a GPU
that is not sm_90, or a CUDA runtime that cannot reach the driver. CPU benchmarks (verifier timing,
the agent's replay) run everywhere.

``--benchmark-disable`` (pytest-benchmark) runs each benchmark body once without timing; the
suites then take their times from their own measurements.
"""

from __future__ import annotations

import functools

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a Hopper (sm_90) GPU; skipped with the reason elsewhere")


@functools.lru_cache(maxsize=1)
def hopper_missing() -> str | None:
    """None when a Hopper GPU is usable here, else what is missing (one sentence)."""
    from argus_cutlass.runtime.cuda import device_info, gpu_available

    ok, why = gpu_available()
    if not ok:
        return f"needs a Hopper (sm_90) GPU: {why}"
    try:
        info = device_info()
    except Exception as exc:  # noqa: BLE001 - any failure to query means "not usable"
        return f"needs a Hopper (sm_90) GPU: cannot query the device ({exc})"
    if info.capability[0] != 9:
        return f"needs a Hopper (sm_90) GPU: device 0 is {info.name} ({info.arch})"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = hopper_missing()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in gpu_items:
            item.add_marker(skip)
