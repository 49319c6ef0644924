"""Skips for the benchmarks, decided at collection time, before any fixture compiles a kernel.

``pytest bench/`` on a machine that cannot run a benchmark skips it with a reason naming what is
missing: torch (the vendor baselines are measured through it; the modules ``importorskip`` it when
they are imported), or a Hopper GPU (tests marked ``gpu``): no NVIDIA GPU or driver at all, a GPU
that is not sm_90, or a CUDA runtime that cannot reach the driver. CPU benchmarks (verifier timing,
the agent's replay) run everywhere.

``--benchmark-disable`` (pytest-benchmark) runs each benchmark body once without timing; the
suites then take their times from their own measurements.

``--bench-out DIR`` (created if missing): every suite writes its markdown table to ``DIR/<suite>.md``
(``<suite>`` is the module name without ``test_``: ``gemm_bench``, ``attention_bench``, ``moe_bench``,
``verify_bench``) and the GPU suites their two plots beside it (``<suite>_ratio.png``,
``<suite>_roofline.png``, :mod:`plots`). It works through the environment variables the suites
read when they write their table (``ARGUS_BENCH_TABLE``, set before each test to the running
module's file, and ``ARGUS_VERIFY_BENCH_TABLE``), so without the option ``ARGUS_BENCH_TABLE=FILE``
still names one suite's table.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

#: the environment variables ``--bench-out`` sets, and their values before the session (restored after)
_ENV = ("ARGUS_BENCH_TABLE", "ARGUS_VERIFY_BENCH_TABLE")
_SAVED: dict[str, str | None] = {}


def pytest_addoption(parser):
    parser.getgroup("argus benchmarks").addoption(
        "--bench-out", metavar="DIR", default=None,
        help="write every suite's table to DIR/<suite>.md and the GPU suites' ratio and roofline plots beside "
             "it (DIR is created; without it ARGUS_BENCH_TABLE=FILE names one suite's table)")


def bench_out(config) -> Path | None:
    """The ``--bench-out`` folder, or None."""
    value = config.getoption("--bench-out", default=None)
    return Path(value) if value else None


def table_path(out: Path, module_file: str) -> Path:
    """``DIR/<suite>.md`` for the bench module ``module_file`` (``test_gemm_bench.py`` -> ``gemm_bench.md``)."""
    stem = Path(module_file).stem
    return out / f"{stem.removeprefix('test_')}.md"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a Hopper (sm_90) GPU; skipped with the reason elsewhere")
    out = bench_out(config)
    if out is None:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".bench-out-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise pytest.UsageError(f"--bench-out {out}: not a writable folder ({exc.strerror or exc})") from None
    _SAVED.update({name: os.environ.get(name) for name in _ENV})
    os.environ["ARGUS_VERIFY_BENCH_TABLE"] = str(table_path(out, "test_verify_bench.py"))


def pytest_unconfigure(config):
    for name, value in _SAVED.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _SAVED.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """With ``--bench-out``, point ``ARGUS_BENCH_TABLE`` at the running module's table: the suites read
    it when they write the table at their module's teardown, which runs before the next module's
    first setup."""
    out = bench_out(item.config)
    if out is not None:
        os.environ["ARGUS_BENCH_TABLE"] = str(table_path(out, str(item.path)))


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
