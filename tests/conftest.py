"""Shared pytest setup: the ``gpu`` and ``nvcc`` markers (also declared in pyproject.toml).

Tests marked ``nvcc`` are skipped here, with the reason, when no nvcc is found; GPU tests are
skipped by ``tests/gpu/conftest.py``."""

from __future__ import annotations


def pytest_configure(config):
    import os

    # tests patch verifier functions in-process: every test verifies afresh unless it turns the cache of
    # verified reports on itself (tests/unit/test_report_cache.py)
    os.environ.setdefault("ARGUS_REPORT_CACHE", "0")
    config.addinivalue_line("markers", "gpu: needs a Hopper (sm_90) GPU; skipped when none is usable")
    config.addinivalue_line(
        "markers", "nvcc: runs nvcc (CI has nvcc); skipped with the reason only when nvcc is absent"
    )


def pytest_collection_modifyitems(config, items):
    nvcc_items = [item for item in items if "nvcc" in item.keywords]
    if not nvcc_items:
        return
    import pytest

    from argus_cutlass.build.toolchain import nvcc_available

    if not nvcc_available():
        skip = pytest.mark.skip(reason="nvcc not found (set ARGUS_NVCC or CUDA_HOME, or put nvcc on PATH)")
        for item in nvcc_items:
            item.add_marker(skip)
