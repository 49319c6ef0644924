"""Verifier speed: one GEMM configuration verified end to end, per tier (CPU only).

Run (no GPU needed; z3-solver installed)::

    taskset -c 0 pytest bench/test_verify_bench.py --benchmark-json=$OUT/verify_bench.json

``taskset -c 0`` pins the process to one core (the issue's budget is "under 0.5 s per
configuration on one CPU core"). For every configuration we ship (the heuristic's choice for each shape of
``bench/test_gemm_bench.py``, every entry of ``agent/tuned_h200.json``, and the stream-K and
split-K kernels of ``tests/gpu/test_gemm.py``),
pytest-benchmark times ``verify_gemm(build_program(cfg))``. That covers building the
program, the resource rules and relations (arith), the enumeration tier (enum) and the SMT tier (z3).
The verifier memoises across calls (decided SMT queries, accumulator maps, stream-K / split-K
division enumerations: the agent verifies many configurations that share them); the benchmark
clears all of it before every round (``argus_cutlass.verify.clear_caches``), so each round is a
cold verification (the parsed invariant catalogue stays cached). The
per-tier seconds of each run (``VerificationReport.tier_seconds``) go to ``extra_info``
and to the table printed at the end, as medians over the rounds. ``ARGUS_VERIFY_BENCH_TABLE``
names a markdown file to write the table to (``--bench-out DIR``: ``DIR/verify_bench.md``; no plot:
there is no vendor baseline to compare with).

Nothing here asserts a time (a loaded machine would make it flaky). The checks are that the
verifier accepts every shipped configuration and proves all of it (no violation, no
``unknown``): a false alarm on a shipped kernel would be a bug.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from pathlib import Path

import pytest

from argus_cutlass.settings import settings

pytest.importorskip("z3", reason="the SMT tier needs z3-solver")

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 5
RESULTS: list[dict] = []


def _bench_shapes() -> list[tuple[int, int, int]]:
    """``SHAPES`` of ``bench/test_gemm_bench.py``, through ``bench/agent_eval.py``'s reader."""
    spec = importlib.util.spec_from_file_location("agent_eval", ROOT / "bench" / "agent_eval.py")
    ae = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(ae)  # type: ignore[union-attr]
    return ae.bench_shapes()


def _shipped_configs():
    from argus_cutlass.agent.store import shipped_entries

    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.heuristics import default_config

    cfgs = [default_config(*s) for s in _bench_shapes()]
    cfgs += [GemmConfig(**e["config"]) for e in shipped_entries() if e.get("kernel", "gemm") == "gemm"]
    # the stream-K and split-K kernels of tests/gpu/test_gemm.py: their G4 check enumerates the
    # unit division as well
    cfgs += [GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="streamk"),
             GemmConfig(layout="nt", tile_n=128, cluster_m=1, stages=6, scheduler="splitk", splits=3)]
    return list(dict.fromkeys(cfgs))


CONFIGS = _shipped_configs()


def _name(cfg) -> str:
    from argus_cutlass.kernels.gemm.program import program_label

    return program_label(cfg).removeprefix("gemm_sm90_")


@pytest.mark.parametrize("cfg", CONFIGS, ids=_name)
def test_verify_one_config(cfg, benchmark):
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm

    reports = []
    seconds = []  # our own wall times: pytest-benchmark keeps none under --benchmark-disable

    def run():
        t0 = time.perf_counter()
        report = verify_gemm(build_program(cfg))
        seconds.append(time.perf_counter() - t0)
        reports.append(report)
        return report

    from argus_cutlass.verify import clear_caches

    report = benchmark.pedantic(run, setup=clear_caches, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert report.ok and report.complete, report.format()  # every shipped configuration is proved
    tiers = {t: statistics.median(r.tier_seconds.get(t, 0.0) for r in reports) for t in ("arith", "enum", "smt")}
    timed = benchmark.stats.stats.data if benchmark.stats is not None else seconds
    row = {"kernel": _name(cfg), "total_s": statistics.median(timed),
           "obligations": len(report.proofs), **{f"{t}_s": v for t, v in tiers.items()}}
    RESULTS.append(row)
    benchmark.extra_info.update(row)


@pytest.fixture(scope="session", autouse=True)
def _print_table():
    yield
    if not RESULTS:
        return
    lines = ["| kernel | proofs | arith ms | enum ms | smt ms | total ms (median) |", "|---|---|---|---|---|---|"]
    for r in RESULTS:
        lines.append(f"| `{r['kernel']}` | {r['obligations']} | {r['arith_s'] * 1e3:.1f} | {r['enum_s'] * 1e3:.1f} "
                     f"| {r['smt_s'] * 1e3:.1f} | {r['total_s'] * 1e3:.1f} |")
    med = {k: statistics.median(r[k] for r in RESULTS) for k in ("arith_s", "enum_s", "smt_s", "total_s")}
    lines.append(f"| **median of {len(RESULTS)} configs** | | {med['arith_s'] * 1e3:.1f} | {med['enum_s'] * 1e3:.1f} "
                 f"| {med['smt_s'] * 1e3:.1f} | {med['total_s'] * 1e3:.1f} |")
    table = "\n".join(lines)
    print("\n" + table)
    path = settings().verify_bench_table
    if path:
        Path(path).write_text(table + "\n")
