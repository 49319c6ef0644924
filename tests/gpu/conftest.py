"""GPU tests run only where a Hopper GPU is present; elsewhere they are skipped with the reason."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def _gpu_reason() -> str | None:
    from argus_cutlass.runtime.cuda import gpu_available

    ok, why = gpu_available()
    return None if ok else f"no usable GPU: {why}"


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or _gpu_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def gpu_device():
    """The current CUDA device's properties; fails (not skips) on a non-Hopper GPU."""
    from argus_cutlass.runtime.cuda import require_sm90

    return require_sm90()
