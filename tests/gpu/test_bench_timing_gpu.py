"""The benchmarks' CUDA-graph timing (``bench/agent_eval.py``'s ``time_graph``, session 27) on a real GPU: a graph
replay runs every captured launch, each over the operand set it rotated to at capture; ``measure_shape``'s graph
mode times a GEMM and cuBLAS that way. Run: ``pytest -q -m gpu tests/gpu/test_bench_timing_gpu.py``."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the benchmarks' timing needs torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import agent_eval  # noqa: E402

pytestmark = pytest.mark.gpu


def test_every_captured_launch_runs_on_each_replay_over_its_rotated_buffer(gpu_device):
    bufs = [torch.zeros(1 << 20, device="cuda") for _ in range(3)]
    turn = [0]

    def fn() -> None:   # each call adds 1 to the next buffer in turn, on the current (capture) stream
        bufs[turn[0] % 3].add_(1.0)
        turn[0] += 1

    ms = agent_eval.time_graph(fn, calls=6, warmup=2, iters=5)
    torch.cuda.synchronize()
    assert math.isfinite(ms) and ms > 0
    assert turn[0] == 3 + 6   # 3 warm-up calls on a side stream, 6 captured; replays call no Python
    # warm-up: buffers 0, 1, 2 once; captured: 0..5 -> each buffer twice; 7 replays (2 warm-up + 5 timed)
    assert [float(b[0]) for b in bufs] == [1 + 2 * 7] * 3
    assert all(bool((b == b[0]).all()) for b in bufs)
    with pytest.raises(ValueError):
        agent_eval.time_graph(fn, calls=0, warmup=0, iters=1)


def test_measure_shape_times_a_kernel_and_cublas_from_graphs(gpu_device, monkeypatch):
    """A swap-AB decode kernel of the declared sub-space, built and checked by the orchestrator, timed per launch
    and from graphs (with the host's cost per call): every number present and finite."""
    agent_eval._bootstrap()
    from argus_cutlass.agent.shapes import GemmShape
    from argus_cutlass.kernels.gemm.space import declared_subspace

    cfg = next(c for c in declared_subspace() if c.swap_ab and c.tile_n == 16 and c.scheduler == "persistent")
    log: list = []
    libs = agent_eval._build([cfg], 4, log, [])
    assert libs, log
    shape = GemmShape(1, 4096, 4096, "bf16", "bf16", "tn", name="graph")
    per_launch = agent_eval.measure_shape(libs, shape, 2, 20, 2, log, host_calls=20)
    seen = []
    real = agent_eval.time_graph

    def spy(fn, calls, warmup, iters):   # about ``iters`` launches in all, whole rotations, at least 5 replays
        seen.append((calls, warmup, iters))
        return real(fn, calls, warmup, iters)

    monkeypatch.setattr(agent_eval, "time_graph", spy)
    graph = agent_eval.measure_shape(libs, shape, 2, 100, 2, log, graph=True)
    calls = graph["graph_calls"]
    assert seen and all(c == calls and w == max(1, 2 // calls) and i == max(5, -(-100 // calls)) for c, w, i in seen)
    assert len(seen) == 2 * 2 + 1   # (cuBLAS + the kernel) per round, cuBLAS once more after the last
    assert not log, log
    for row in (per_launch, graph):
        assert row["cublas_ms"] > 0 and all(v and v > 0 for v in row["kernels"].values())
    assert graph["graph_calls"] % graph["operand_sets"] == 0 and graph["graph_calls"] >= agent_eval.GRAPH_CALLS
    assert set(per_launch["host_us"]) == set(libs) | {"cublas"} and all(v > 0 for v in per_launch["host_us"].values())


def test_the_main_jobs_timing_both_ways(gpu_device, monkeypatch):
    """generate.run with Options(timing=...) (what `argus-cutlass gemm --timing` sets): a decode GEMM and cuBLAS
    timed from a CUDA graph over rotated operands (the default) and one launch between events; both pass the
    check and give a time, a baseline and the method in the record. From a graph also a kernel that allocates its
    stream-K workspace per call (cudaMallocAsync + CUTLASS's zeroing inside the capture) and one on the aligned
    staging path (M = 300 with a column-major A: a staging workspace per call), and one with beta != 0 (C rotated
    too); each with cuBLAS's time beside it (session 28: cuBLAS refused the staged problem)."""
    import argus_cutlass.runtime.check as rcheck
    from argus_cutlass.generate import Options, run
    from argus_cutlass.kernels.gemm.check import graph_calls, operand_sets
    from argus_cutlass.kernels.gemm.problem import GemmProblem
    from argus_cutlass.kernels.gemm.space import declared_subspace

    seen = []
    real = rcheck.time_graph

    def spy(fn, stream, calls=16, warmup=3, iters=10):
        seen.append(calls)
        return real(fn, stream, calls=calls, warmup=warmup, iters=iters)

    monkeypatch.setattr(rcheck, "time_graph", spy)
    problem = GemmProblem(8, 4096, 4096)
    for timing in ("graph", "launch"):
        r = run(problem, options=Options(timing=timing, iters=40))
        assert r.ok, (timing, r.status, r.error)
        assert r.ms and r.ms > 0 and r.baseline_ms and r.baseline_ms > 0, timing
        assert r.record()["timing"]["method"] == timing
    assert seen == [graph_calls(operand_sets(problem))] and seen[0] % operand_sets(problem) == 0
    streamk = next(c for c in declared_subspace() if c.scheduler == "streamk" and not c.swap_ab)
    for prob, cfg, beta in ((GemmProblem(256, 4096, 4096), streamk, 0.0),
                            (GemmProblem(300, 1024, 1000, layout="nt"), None, 0.0),
                            (GemmProblem(64, 4096, 4096), None, 0.5)):   # C rotated with A, B, D
        r = run(prob, cfg, options=Options(timing="graph", iters=40, beta=beta))
        assert r.ok and r.ms and r.ms > 0, (prob, r.status, r.error)
        assert r.baseline_ms and r.baseline_ms > 0 and "baseline" not in r.skipped, (prob, r.skipped)
        assert cfg is not None or beta or r.path["kind"] == "staged", r.path
