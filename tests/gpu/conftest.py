"""GPU tests run only where a Hopper GPU is present; elsewhere they are skipped with the reason."""

from __future__ import annotations

import functools
import gc
import sys

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


@pytest.fixture(scope="module", autouse=True)
def _write_probe_summary(request):
    """A probe module's ``RESULTS`` dict goes to ``ARGUS_PROBE_OUT`` (with the module's
    ``PROBE_SUFFIX`` inserted before ``.json``) once the module's tests have run."""
    yield
    results = getattr(request.module, "RESULTS", None)
    suffix = getattr(request.module, "PROBE_SUFFIX", None)
    from argus_cutlass.settings import settings

    path = settings().probe_out
    if path and results and suffix is not None:
        import json

        with open(path.replace(".json", suffix + ".json") if suffix else path, "w") as f:
            json.dump(results, f, indent=1)


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory():
    """After each test, hand torch's cached GPU blocks back to the driver: xdist workers share one GPU, and a
    worker's allocator kept up to 39 GB reserved between tests of different sizes, which ran 2-8 workers on
    an 80 GB H100 out of memory (session 45; the H200's 139 GB had hidden it). No-op where torch never
    initialised CUDA."""
    yield
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()
