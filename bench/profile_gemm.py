"""Chosen kernels of the declared GEMM sub-space on one shape: built, checked, timed against cuBLAS, or
profiled one launch each under ncu (e.g. a decode shape's K splits against the unsplit kernels).

    python3 bench/profile_gemm.py --shape 1x4096x14336 --kernels 128x16x64_c1x1_s8_coop_e128x16_rn1_swapab,splitk2,splitk4,streamk
    python3 bench/profile_gemm.py --shape 1x4096x14336 --kernels '64x16x64_c1x1_s12_pp+!_as' --also stages=22
    python3 bench/profile_gemm.py --shape 1x4096x14336 --best-of bench/data/gemm_sweep_bf16_bf16_tn_h200.json --graph
    ncu --profile-from-start off -k regex:gemm_kernel --metrics gpc__cycles_elapsed.max,... \\
        python3 bench/profile_gemm.py --shape 1x4096x14336 --kernels splitk2,splitk4 --ncu

``--kernels``: comma-separated selectors, each a ``+``-joined set of substrings that a kernel name of
:func:`argus_cutlass.kernels.gemm.space.declared_subspace` (in the shape's flavor) must all contain, e.g.
``128x16x64+splitk4``, a part written ``!text`` must not be contained (``64x16x64_c1x1_s12_pp+!_as``: not the
``_as2`` twin; single-quote it in an interactive shell, where ``!`` is bash's history expansion; every kernel
matching any selector is taken; a selector matching none, or with an empty part, is an error naming it); ``--also FIELD=VALUE`` adds, for each selected kernel, a copy with those fields changed (outside
the declared sub-space, e.g. a deeper pipeline; the verifier refuses one that does not fit, named). The
kernels are verified, compiled and checked against the fp32 reference on the sweep's check
shapes in one orchestrator batch (``bench/agent_eval.py``), then timed as the sweep times them
(``agent_eval.measure_shape``: CUDA events, operands rotated over 3x L2, interleaved with cuBLAS in
``--rounds`` rounds, medians); ``--ncu``: one launch of each between ``cudaProfilerStart`` / ``Stop``
instead, nothing timed; ``--graph``: also timed as back-to-back launches replayed from a CUDA graph
(``agent_eval.time_graph``). The host's cost of one call (100 back-to-back calls, nothing synchronized) is printed
too: a kernel shorter than it is timed partly by the host one launch between events. Prints one line per kernel: ms, cuBLAS ms, the weight-read floor at 4.3 TB/s
(``N x K`` elements of B) and the ratio to it. Needs torch and a Hopper GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent_eval  # noqa: E402  (bench/agent_eval.py: the sweep's build and timing)
from agent_eval import select  # noqa: E402  (the kernel selectors, shared with sweep_gemm --extend)

#: the HBM ceiling of ANCHORS.md (bytes / s)
HBM_BYTES_PER_S = 4.3e12


def _unhashed(name: str) -> str:
    """A kernel name without its trailing ``_<fingerprint>`` (8 hex digits).

    >>> _unhashed("argus_gemm_sm90_bf16_bf16_tn_64x16x64_c1x1_s12_pp_e64x16_rn1_swapab_217d10cc")
    'argus_gemm_sm90_bf16_bf16_tn_64x16x64_c1x1_s12_pp_e64x16_rn1_swapab'
    """
    head, _, tail = name.rpartition("_")
    return head if len(tail) == 8 and all(c in "0123456789abcdef" for c in tail) else name


def table_best(path: str, key: str) -> str:
    """The name of the fastest measured kernel of row ``key`` (``MxNxK``) of a sweep table, or ``"error: ..."``
    saying why there is none (no such file, not a sweep table, no such row, nothing timed)."""
    import json

    try:
        rows = json.loads(Path(path).read_text())["shapes"]
        timed = {nm: v for nm, v in rows.get(key, {}).get("kernels", {}).items() if v}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"error: not a readable sweep table ({type(exc).__name__}: {exc})"
    if not timed:
        return f"error: no timed kernel on row {key}"
    return min(timed, key=timed.get)


def table_config(path: str, name: str) -> dict | None:
    """The configuration a sweep table recorded for kernel ``name`` (its ``kernel_configs``), or None."""
    import json

    try:
        return json.loads(Path(path).read_text()).get("kernel_configs", {}).get(name)
    except (OSError, ValueError, AttributeError):
        return None


def table_best_config(path: str, key: str, space: dict) -> tuple[str, Any, bool]:
    """The fastest kernel of row ``key`` of a sweep table as ``(name, configuration, declared)``: the kernel of
    ``space`` (name -> configuration of the declared sub-space) with that name less its fingerprint when there is one
    (``declared``), else the configuration the table recorded (``kernel_configs``; a kernel of an older sweep).

    Raises:
        ValueError: no readable table, row or timed kernel (:func:`table_best`'s reason), or a best kernel neither
            declared nor recorded.
    """
    from argus_cutlass.kernels.gemm.config import GemmConfig

    best = table_best(path, key)
    if best.startswith("error: "):
        raise ValueError(best[7:])
    hit = [nm for nm in space if _unhashed(nm) == _unhashed(best)]
    if hit:
        return hit[0], space[hit[0]], True
    recorded = table_config(path, best)
    if recorded is None:
        raise ValueError(f"its best kernel {best} is neither in the declared sub-space of this flavor nor configured "
                         "in the table's kernel_configs")
    return best, GemmConfig(**recorded), False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, help="MxNxK, e.g. 1x4096x14336")
    ap.add_argument("--kernels", default="", help="comma-separated selectors (substrings joined by +; !text: not containing text)")
    ap.add_argument("--best-of", default="", metavar="SWEEP_TABLE",
                    help="also the kernel a bench/sweep_gemm.py table measured fastest on --shape (matched by name "
                         "without its fingerprint, so a table from older code still names it; one outside the declared "
                         "sub-space is rebuilt from the table's kernel_configs)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--out-dtype", default=None, choices=("bf16", "fp16", "fp32"), help="default: --dtype")
    ap.add_argument("--layout", default="tn", choices=("tn", "nt", "nn", "tt"))
    ap.add_argument("--rounds", type=int, default=5,
                    help="timing rounds, cuBLAS and the kernels interleaved, medians over rounds (default 5)")
    ap.add_argument("--iters", type=int, default=50, help="CUDA-event launches per timing (default 50)")
    ap.add_argument("--warmup", type=int, default=5, help="launches before each timing (default 5)")
    ap.add_argument("--also", action="append", default=[], metavar="FIELD=VALUE[,FIELD=VALUE]",
                    help="for each selected kernel also a copy with these GemmConfig fields changed (repeatable: one "
                         "copy per option), e.g. stages=22 (a depth past what fits is refused by the verifier, named); "
                         "timed in the same rounds as the originals")
    ap.add_argument("--ncu", action="store_true", help="one launch per kernel inside cudaProfilerStart/Stop")
    ap.add_argument("--ncu-cublas", action="store_true",
                    help="with --ncu: then one torch.mm (cuBLAS) on the same operands inside the profiled range")
    ap.add_argument("--graph", action="store_true",
                    help="also time every kernel and cuBLAS as back-to-back launches replayed from a CUDA graph "
                         "(agent_eval.time_graph; how a serving engine runs decode), printed beside the per-launch times")
    args = ap.parse_args(argv)
    try:
        m, n, k = (int(v) for v in args.shape.lower().split("x"))
        if min(m, n, k) < 1:
            raise ValueError("sizes must be >= 1")
    except ValueError as exc:
        ap.error(f"--shape {args.shape!r}: expected MxNxK of positive integers ({exc})")
    agent_eval._bootstrap()
    from argus_cutlass.agent.shapes import GemmShape
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.program import program_label
    from argus_cutlass.kernels.gemm.space import declared_subspace

    out_dtype = args.out_dtype or args.dtype
    shape = GemmShape(m, n, k, args.dtype, out_dtype, args.layout, name="profile")
    problem = shape.problem().validate()
    space = {kernel_name(c): c for c in declared_subspace(args.dtype, out_dtype, args.layout)}
    if not args.kernels and not args.best_of:
        ap.error("give --kernels, --best-of or both")
    try:
        names = select(list(space), args.kernels) if args.kernels else []
    except ValueError as exc:
        ap.error(f"--kernels {args.kernels!r}: {exc}")
    best_cfg = None   # the table's best when it is not a kernel of today's declared sub-space (older sweeps)
    if args.best_of:
        try:
            best, cfg, declared = table_best_config(args.best_of, f"{m}x{n}x{k}", space)
        except ValueError as exc:
            ap.error(f"--best-of {args.best_of}: {exc}")
        if declared:
            names += [best] if best not in names else []
        else:
            best_cfg = cfg
    from argus_cutlass.kernels.fields import assignments

    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.space import feasible

    configs = [space[nm] for nm in names]
    if best_cfg is not None:
        print(f"-- {best}: the table's best, not in the declared sub-space: rebuilt from its kernel_configs")
        configs.append(best_cfg)
    base = len(configs)
    for spec in args.also:
        try:   # values typed by GemmConfig's fields; its cross-field rules run in replace
            change = assignments(GemmConfig, spec)
            copies = [c.replace(**change) for c in configs[:base]]
        except ValueError as exc:
            ap.error(f"--also {spec!r}: {exc}")
        for c in copies:
            ok, why = feasible(c)
            if ok:
                configs.append(c)
            else:   # named by its readable label: a program the DSL refuses has no kernel name (no fingerprint)
                print(f"-- argus_{program_label(c)}: refused by the verifier: {'; '.join(why)[:300]}")
    log: list = []
    libs = agent_eval._build(list(dict.fromkeys(configs)), None, log, [])
    for entry in log:
        print(f"-- {entry['kernel']}: {entry['phase']} failed: {entry['error'][:300]}")
    if not libs:
        print("no kernel built and passed its check")
        return 1
    if args.ncu:
        import torch

        sets = agent_eval._operand_sets(problem, torch)[:1]
        a, b, d = sets[0]["A"].data_ptr(), sets[0]["B"].data_ptr(), sets[0]["D"].data_ptr()
        for nm, (_, lib, _) in libs.items():
            lib(a, b, None, d, m, n, k, problem.lda, problem.ldb, problem.ldd, problem.ldd, 1.0, 0.0, 0)
        from argus_cutlass.kernels.gemm.problem import layout_views

        va, vb = layout_views(sets[0]["A"], sets[0]["B"], problem)
        out_dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[problem.out_dtype]

        def cublas() -> None:   # torch's cuBLAS on the same operands (its kernels, any name, profiled after ours)
            torch.mm(va, vb) if out_dt == va.dtype else torch.mm(va, vb, out_dtype=out_dt)

        if args.ncu_cublas:   # its warm-up (cuBLAS's handle and heuristics) outside the profiled range
            cublas()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for nm, (_, lib, _) in libs.items():
            lib(a, b, None, d, m, n, k, problem.lda, problem.ldb, problem.ldd, problem.ldd, 1.0, 0.0, 0)
            print(f"launched {nm}")
        torch.cuda.synchronize()
        if args.ncu_cublas:
            cublas()
            print("launched cublas")
            torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return 0
    rows = [("", agent_eval.measure_shape(libs, shape, args.warmup, args.iters, args.rounds, log, host_calls=100))]
    if args.graph:
        rows.append(("graph replay: ", agent_eval.measure_shape(libs, shape, args.warmup, args.iters, args.rounds,
                                                                 log, graph=True)))
    floor_ms = n * k * problem.operands()["B"].elem_bytes / HBM_BYTES_PER_S * 1e3   # B (the weights) read once
    for mode, row in rows:
        cub = row.get("cublas_ms")
        host = row.get("host_us", {})
        print(f"{mode}{shape.label}: weight-read floor {floor_ms * 1e3:.1f} us at 4.3 TB/s; cuBLAS "
              + (f"{cub * 1e3:.1f} us ({cub / floor_ms:.2f}x)" if cub else "not timed")
              + (f"; host {host['cublas']:.1f} us per call" if "cublas" in host else ""))
        for nm, ms in sorted(row["kernels"].items(), key=lambda kv: (kv[1] is None, kv[1] or 0)):
            print(f"  {nm}: " + (f"{ms * 1e3:.1f} us ({ms / floor_ms:.2f}x floor"
                                  + (f", cuBLAS / ours {cub / ms:.3f}" if cub else "")
                                  + (f", host {host[nm]:.1f} us per call" if nm in host else "") + ")"
                                  if ms else "not timed"))
    for entry in log:
        if entry.get("phase") == "time":
            print(f"-- {entry['kernel']}: timing failed: {entry['error'][:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
