"""The attainable weight-read floor of decode GEMMs: how fast a plain streaming-read kernel reads the weight's
``N x K`` elements on this GPU, launch included, beside the 4.3 TB/s floor of issue 13 item 2 and beside the
GEMM sweep's best kernel on the same row.

    python3 bench/read_floor.py [--table bench/data/gemm_sweep_bf16_bf16_tn_h200.json] [--m 1] [--out FILE.json]

Why: on the decode rows with weights of 84-168 MB the sweep's best sits 1.16-1.49x above ``bytes / 4.3 TB/s``
(RESULTS session 26) while the largest weights (0.5-0.9 GB) reach 0.98-1.0x: a part that does not scale with the
bytes (launch, first bytes, last wave). This measures that part without any GEMM: the same bytes read by the
fastest of a few plain read kernels (16-byte ``ld.global.cs`` loads, ``UNROLL`` of them in flight per thread,
``blocks_per_sm x 132`` CTAs of ``threads``), an empty kernel's time under the same CUDA events, and so how close
to the floor a kernel reading those bytes once can be at all.

Timing as the sweep's (``bench/agent_eval.py``): :func:`argus_cutlass.runtime.check.time_kernel` (CUDA events
around each launch, median of ``--iters``) per variant, the variants in turn in each of ``--rounds`` rounds, the
median over rounds; buffers rotated over more than 3x the 60 MB L2 (a new weight copy each launch). The kernel's result (an XOR of every word read) is written to a sink
and checked, for every variant, against a host XOR of the same buffer (a read kernel that skipped bytes would be
caught).

Prints one line per weight size (N x K, MB): floor us, best read kernel us (its configuration and ratio to the
floor), the sweep's best GEMM at ``--m`` (ratio to the floor and to the read kernel), cuBLAS from the table;
``--out`` writes the same as JSON. Needs torch, nvcc and a Hopper GPU.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the floor of issue 13 item 2 (``bench/profile_gemm.py``'s HBM_BYTES_PER_S): 4.3 TB/s
HBM_BYTES_PER_S = 4.3e12
#: the read kernels tried per size: (CTAs per SM, threads per CTA, 16-byte loads in flight per thread)
VARIANTS = tuple((b, t, u) for b in (1, 2, 4) for t in (256, 512, 1024) for u in (4, 8) if b * t <= 2048)

KERNEL = r"""
#include <cstdint>
#include <cuda_runtime.h>

template <int UNROLL>
__global__ void __launch_bounds__(1024) read_xor(const int4* __restrict__ p, unsigned long long n16,
                                                 unsigned int* sink) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned int acc = 0;
  for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= (unsigned)(v[u].x ^ v[u].y ^ v[u].z ^ v[u].w);
  }
  for (; i < n16; i += stride) {
    int4 v = __ldcs(p + i);
    acc ^= (unsigned)(v.x ^ v.y ^ v.z ^ v.w);
  }
  // one XOR per warp, then one atomic per warp: the sink holds the XOR of every 32-bit word read
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(sink, acc);
}

__global__ void empty_kernel() {}

extern "C" int read_xor_launch(const void* p, unsigned long long bytes, unsigned int* sink, int blocks, int threads,
                               int unroll, cudaStream_t stream) {
  const unsigned long long n16 = bytes / 16;
  const int4* q = static_cast<const int4*>(p);
  if (unroll == 4) read_xor<4><<<blocks, threads, 0, stream>>>(q, n16, sink);
  else if (unroll == 8) read_xor<8><<<blocks, threads, 0, stream>>>(q, n16, sink);
  else return -1;
  return (int)cudaGetLastError();
}

extern "C" int empty_launch(cudaStream_t stream) {
  empty_kernel<<<1, 32, 0, stream>>>();
  return (int)cudaGetLastError();
}
"""


def build() -> ctypes.CDLL:
    """Compile :data:`KERNEL` through the project's nvcc driver (:func:`argus_cutlass.build.nvcc.compile_cu`: the
    fixed sm_90a flags, ``-O3 -DNDEBUG``, the content-addressed cache) and load it.

    Raises:
        ToolchainError, CompileError: as ``compile_cu`` (nvcc missing or failed).
    """
    from argus_cutlass.build.nvcc import compile_cu

    lib = ctypes.CDLL(str(compile_cu(KERNEL, "read_floor", "shared").path))
    lib.read_xor_launch.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.empty_launch.argtypes = [ctypes.c_void_p]
    return lib


def weight_sizes(table: dict, m: int) -> list[tuple[int, int]]:
    """The (N, K) of the table's rows at M = ``m`` whose 2-byte weights exceed the L2 (60 MB), sorted by bytes."""
    nk = {tuple(int(x) for x in key.split("x")[1:]) for key in table["shapes"] if int(key.split("x")[0]) == m}
    return sorted(((n, k) for n, k in nk if 2 * n * k > 60 * 2**20), key=lambda s: (s[0] * s[1], s))


def _interleaved_ms(launches: list, rounds: int, iters: int, warmup: int, graph_calls: int = 0) -> list[float]:
    """Per launch function, the median over ``rounds`` rounds of :func:`argus_cutlass.runtime.check.time_kernel`
    (a median of ``iters`` CUDA-event launches on torch's current stream) or, with ``graph_calls``, of
    ``agent_eval.time_graph`` (``graph_calls`` back-to-back launches replayed from a CUDA graph, per launch); each
    round times the functions in turn (each call rotates buffers), warm-up in the first round only."""
    import torch

    from argus_cutlass.runtime.check import time_kernel

    sys.path.insert(0, str(ROOT / "bench"))
    from agent_eval import time_graph

    per: list[list[float]] = [[] for _ in launches]
    for r in range(rounds):
        for j, fn in enumerate(launches):
            w = warmup if r == 0 else 0
            per[j].append(time_graph(fn, graph_calls, w, iters) if graph_calls else
                          time_kernel(fn, warmup=w, iters=iters, stream=torch.cuda.current_stream().cuda_stream))
    return [statistics.median(ms) for ms in per]


def measure(lib: ctypes.CDLL, n: int, k: int, rounds: int, iters: int, warmup: int, sms: int,
            graph: bool = False) -> dict:
    """One weight size: every read-kernel variant and the empty kernel timed interleaved (``graph``: as
    back-to-back launches replayed from a CUDA graph, per launch); the XOR checked."""
    import numpy as np
    import torch

    nbytes = 2 * n * k
    if nbytes % 16:
        raise SystemExit(f"{n}x{k}: {nbytes} bytes is not a whole number of 16-byte loads")
    from argus_cutlass.generate import ROTATE_BYTES   # the product's and the sweep's rotation

    count = max(2, math.ceil(ROTATE_BYTES / nbytes))
    bufs = [torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda") for _ in range(count)]
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    turn = [0]

    def stream() -> ctypes.c_void_p:   # torch's current stream at the call (the capture stream in a capture)
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def reader(blocks_per_sm: int, threads: int, unroll: int):
        def go() -> None:
            buf = bufs[turn[0] % count]
            turn[0] += 1
            rc = lib.read_xor_launch(ctypes.c_void_p(buf.data_ptr()), nbytes, ctypes.c_void_p(sink.data_ptr()),
                                     blocks_per_sm * sms, threads, unroll, stream())
            if rc:
                raise SystemExit(f"read_xor launch failed (CUDA error {rc}) at {n}x{k}")
        return go

    # correctness of every reader variant first: its XOR over buffer 0 equals the host's (a variant that skipped
    # bytes would otherwise win the timing)
    want = int(np.bitwise_xor.reduce(bufs[0].cpu().numpy().view(np.uint32)))
    for v in VARIANTS:
        sink.zero_()
        turn[0] = 0
        reader(*v)()
        torch.cuda.synchronize()
        got = int(sink.cpu().numpy().view(np.uint32)[0])
        if got != want:
            raise SystemExit(f"read_xor b{v[0]}t{v[1]}u{v[2]} read a wrong sum at {n}x{k}: {got:#x} != {want:#x}")
    launches = [reader(*v) for v in VARIANTS] + [lambda: lib.empty_launch(stream())]
    from argus_cutlass.generate import graph_calls

    ms = _interleaved_ms(launches, rounds, iters, warmup, graph_calls(count) if graph else 0)
    variants = {f"b{b}t{t}u{u}": t_ms for (b, t, u), t_ms in zip(VARIANTS, ms[:-1])}
    best = min(variants, key=variants.get)
    bufs.clear()
    torch.cuda.empty_cache()
    return {"n": n, "k": k, "bytes": nbytes, "floor_ms": nbytes / HBM_BYTES_PER_S * 1e3, "read_ms": variants,
            "best_read": best, "best_read_ms": variants[best], "empty_ms": ms[-1]}


def table_best(table: dict, m: int, n: int, k: int) -> dict:
    """The sweep table's best GEMM at ``m x n x k`` (``gemm_best`` name, ``gemm_ms``; absent when the row has no
    time) and its cuBLAS time (``cublas_ms``, None when absent)."""
    row = table["shapes"].get(f"{m}x{n}x{k}", {})
    good = {nm: v for nm, v in row.get("kernels", {}).items() if v}
    out: dict = {"cublas_ms": row.get("cublas_ms")}
    if good:
        out["gemm_best"] = min(good, key=good.get)
        out["gemm_ms"] = good[out["gemm_best"]]
    return out


def report_line(r: dict) -> str:
    """One printed row of :func:`measure`'s result with :func:`table_best`'s fields (times in us)."""
    g = r.get("gemm_ms")
    return (f"{r['n']:>6} x {r['k']:<6} {r['bytes'] / 1e6:>6.0f} {r['floor_ms'] * 1e3:>9.1f} "
            f"{r['best_read_ms'] * 1e3:>8.1f} {r['best_read_ms'] / r['floor_ms']:>6.3f} {r['best_read']:>9} "
            f"{r['empty_ms'] * 1e3:>8.1f} "
            + (f"{g * 1e3:>8.1f} {g / r['floor_ms']:>6.3f} {g / r['best_read_ms']:>6.3f}" if g else f"{'-':>22}")
            + (f" {r['cublas_ms'] * 1e3:>9.1f}" if r.get("cublas_ms") else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default=str(ROOT / "bench/data/gemm_sweep_bf16_bf16_tn_h200.json"),
                    help="a bench/sweep_gemm.py table: its weight sizes and its best GEMM per row")
    ap.add_argument("--m", type=int, default=1, help="the table's rows at this M (default 1)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, each timing every variant in turn")
    ap.add_argument("--iters", type=int, default=20, help="launches per variant and round (their median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="", help="also write the rows as JSON here")
    ap.add_argument("--graph", action="store_true",
                    help="time back-to-back launches replayed from a CUDA graph (per launch) instead of one launch "
                         "between CUDA events (the GEMM and cuBLAS columns stay the table's per-launch times)")
    args = ap.parse_args(argv)
    path = Path(args.table)
    if not path.is_file():
        ap.error(f"--table {path}: no such file")
    table = json.loads(path.read_text())
    sizes = weight_sizes(table, args.m)
    if not sizes:
        ap.error(f"--table {path}: no row at M = {args.m} with weights larger than the L2")
    import torch

    if not torch.cuda.is_available():
        print("read_floor: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lib = build()
    print(("timed from CUDA graphs (read, empty); " if args.graph else "")
          + f"{'N x K':>15} {'MB':>6} {'floor us':>9} {'read us':>8} {'/floor':>6} {'variant':>9} {'empty us':>8} "
          f"{'GEMM us':>8} {'/floor':>6} {'/read':>6} {'cuBLAS us':>9}")
    rows = []
    for n, k in sizes:
        r = measure(lib, n, k, args.rounds, args.iters, args.warmup, sms, args.graph)
        r.update(table_best(table, args.m, n, k))
        rows.append(r)
        print(report_line(r), flush=True)
    within = sum(1 for r in rows if r["best_read_ms"] <= 1.15 * r["floor_ms"])
    print(f"read kernel within 1.15x of the floor on {within} of {len(rows)} sizes"
          + ("; the GEMM and cuBLAS columns are the table's per-launch times (not comparable with the graph-timed "
             "read: bench/sweep_gemm.py --refine --graph times them from graphs)" if args.graph else
             f"; GEMM within 1.05x of the read kernel on "
             f"{sum(1 for r in rows if r.get('gemm_ms') and r['gemm_ms'] <= 1.05 * r['best_read_ms'])} of {len(rows)}"))
    if args.out:
        Path(args.out).write_text(json.dumps({"table": str(path), "m": args.m, "graph": args.graph, "rows": rows},
                                             indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
