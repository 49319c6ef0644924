"""Shared pytest setup: the ``gpu`` and ``nvcc`` markers (also declared in pyproject.toml)."""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a Hopper (sm_90) GPU; skipped when none is usable")
    config.addinivalue_line(
        "markers", "nvcc: runs nvcc (CI has nvcc); skipped with the reason only when nvcc is absent"
    )
