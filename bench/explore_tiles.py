"""Configurations outside the declared GEMM sub-space tried on many shapes at once: one build batch for all of
them (every core busy), then each shape timed from CUDA graphs beside its sweep-table best and cuBLAS.

    python3 bench/explore_tiles.py --plan plan.json --table bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json \
        --out explore.json
    python3 bench/explore_tiles.py --mirror-cublas bench/data/cublas_kernels_h200_s30.json \
        --table bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json --below 0.9 --plan-out plan.json   # no GPU

``--plan``: a JSON object ``{"MxNxK": [SPEC, ...], ...}``; a SPEC is ``SELECTOR`` or ``SELECTOR:FIELD=VALUE,...``:
a kernel of :func:`~argus_cutlass.kernels.gemm.space.declared_subspace` picked by a selector (substrings joined by
``+``, as ``profile_gemm.py --kernels``; it must match exactly one kernel) or ``best`` (the row's fastest kernel in
``--table``), with fields changed (``profile_gemm.py --also``; e.g. ``64x64x64_c1x1_s8_pp_e64x32_rn1:tile_n=56,
epi_n=8,stages=12``). A copy the verifier refuses is printed with the rule and skipped. The kernels are built,
checked against the fp32 reference (``bench/agent_eval.py``'s check shapes) and timed as the sweep times them
(``agent_eval.measure_shape``, ``--graph``: back-to-back launches replayed from a CUDA graph, operands rotated,
interleaved with cuBLAS in ``--rounds`` rounds, medians). Prints per shape each kernel's time and cuBLAS / ours;
``--out`` keeps them as JSON (``{"MxNxK": {"cublas_ms": .., "kernels": {name: ms}, "configs": {name: config}}}``).
Needs torch and a Hopper GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent_eval  # noqa: E402  (bench/agent_eval.py: the sweep's build and timing)
from agent_eval import select  # noqa: E402
from profile_gemm import table_best_config  # noqa: E402


def resolve(spec: str, key: str, space: dict, table: str | None):
    """The configuration a SPEC names for row ``key`` (module docstring).

    Raises:
        ValueError: the selector matches no kernel or more than one, ``best`` without a table row, or a field
            assignment the configuration model refuses (the message names the spec).
    """
    from argus_cutlass.kernels.fields import assignments

    from argus_cutlass.kernels.gemm.config import GemmConfig

    sel, _, change = spec.partition(":")
    if sel == "best":
        if not table:
            raise ValueError(f"{spec!r}: 'best' needs --table")
        try:
            _, cfg, _ = table_best_config(table, key, space)
        except ValueError as exc:
            raise ValueError(f"{spec!r} on {key}: {exc}") from None
    else:
        names = select(list(space), sel)
        if len(names) != 1:
            raise ValueError(f"{spec!r}: selector {sel!r} matches {len(names)} kernels ({', '.join(names[:4])})")
        cfg = space[names[0]]
    return cfg.replace(**assignments(GemmConfig, change)) if change else cfg


#: an nvjet kernel name (cuBLAS 12.x+ on sm_90): tile (over the output's rows of cuBLAS's column-major problem, i.e.
#: torch's N, x over torch's M), k-tile x stages, cluster (same order), raster, optional cooperative and split-K
NVJET = re.compile(r"nvjet_sm90_tst_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_([hv])_bz(_coop[AB])?(_splitK)?_")

#: declared kernels whose copies a mirrored configuration starts from (then every field that differs is set)
MIRROR_BASES = {("cooperative", False): "128x128x64_c1x1_s6_coop_e128x32_rn1+!stream+!split",
                ("pingpong", False): "64x64x64_c1x1_s8_pp_e64x32_rn1+!swapab",
                ("pingpong", True): "64x64x64_c1x1_s8_pp_e64x32_rn1_swapab",
                ("cooperative", True): "128x32x64_c1x1_s8_coop_e128x32_rn1_swapab+!stream+!split+!cluster"}


def mirror_specs(kernel: str, m: int, swap_max_m: int = 256) -> list[str]:
    """SPECs (module docstring) of our configurations closest to cuBLAS's nvjet ``kernel`` on an ``m``-row problem,
    [] when none maps: tile ``a`` (over N) x ``b`` (over M) is our ``tile_m = b``, ``tile_n = a`` (``b`` 64:
    ping-pong, 128 / 256: cooperative), else with ``m <= swap_max_m`` swap-AB (kernel ``tile_m = a`` in {64, 128},
    ``tile_n = b``); the cluster likewise; stages as cuBLAS's, at most 12 (the space's range) and lowered to fit
    shared memory (:func:`~argus_cutlass.kernels.gemm.heuristics.fit_stages`); split-K as split-K 2 (cooperative
    only); the epilogue subtile :func:`~argus_cutlass.kernels.gemm.space.epilogue_width`. The operands' majors are not
    looked at: the mapping is for layout ``tn`` (both K-major), the layout of the tables it is used on; in another
    layout an odd multiple of 8 along an MN-major operand gets the unswizzled smem atom (declared_subspace keeps
    such widths out).

    >>> mirror_specs("nvjet_sm90_tst_64x56_64x14_4x2_h_bz_TNT", 100)
    ['64x64x64_c1x1_s8_pp_e64x32_rn1_swapab:tile_m=64,tile_n=56,cluster_m=4,cluster_n=2,stages=12,epi_n=8']
    >>> mirror_specs("nvjet_sm90_tst_96x64_64x10_1x2_h_bz_TNN", 1024)
    ['64x64x64_c1x1_s8_pp_e64x32_rn1+!swapab:tile_m=64,tile_n=96,cluster_m=2,cluster_n=1,stages=10,epi_n=32']
    """
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.heuristics import fit_stages
    from argus_cutlass.kernels.gemm.space import epilogue_width

    hit = NVJET.search(kernel)
    if not hit:
        return []
    a, b, tk, st, ca, cb = (int(v) for v in hit.groups()[:6])
    split = bool(hit.group(9))
    if b in (64, 128, 256) and a % 8 == 0 and a <= 256:
        swap, tm, tn, cm, cn = False, b, a, cb, ca
    elif m <= swap_max_m and a in (64, 128) and b % 8 == 0 and b <= 256:
        swap, tm, tn, cm, cn = True, a, b, ca, cb
    else:
        return []
    schedule = "pingpong" if tm == 64 else "cooperative"
    if split and schedule != "cooperative":
        return []
    epi_n = epilogue_width(tn)
    try:
        cfg = fit_stages(GemmConfig(tile_m=tm, tile_n=tn, tile_k=tk, cluster_m=cm, cluster_n=cn, stages=min(st, 12),
                                    schedule=schedule, epi_m=64 if schedule == "pingpong" else 128, epi_n=epi_n,
                                    swap_ab=swap, scheduler="splitk" if split else "persistent",
                                    splits=2 if split else 1))
    except ValueError:
        return []
    fields = [f"tile_m={tm}", f"tile_n={tn}", f"cluster_m={cm}", f"cluster_n={cn}", f"stages={cfg.stages}",
              f"epi_n={epi_n}"] + ([f"tile_k={tk}"] if tk != 64 else []) + (["scheduler=splitk", "splits=2"] if split else [])
    return [f"{MIRROR_BASES[(schedule, swap)]}:{','.join(fields)}"]


def plan_from_cublas(kernels_json: str, table: str, below: float) -> dict[str, list[str]]:
    """A plan (module docstring) for the rows of ``table`` where cuBLAS / ours is below ``below``: per row the
    configurations mirroring the kernels cuBLAS ran there (``bench/cublas_kernels.py --out``: :func:`mirror_specs`)
    and ``best``; rows with nothing to mirror are left out (the rows: ``cublas_kernels.shapes_below``)."""
    from cublas_kernels import shapes_below

    runs = json.loads(Path(kernels_json).read_text())
    plan = {}
    for key in shapes_below(table, below):
        kernels = runs.get(key, {})
        m = int(key.split("x")[0])
        specs = [sp for nm in kernels for sp in mirror_specs(nm, m)]
        if specs:
            plan[key] = list(dict.fromkeys(specs)) + ["best"]
    return plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", help="JSON: {MxNxK: [SPEC, ...]}")
    ap.add_argument("--mirror-cublas", metavar="KERNELS_JSON",
                    help="write a plan mirroring cuBLAS's kernels (bench/cublas_kernels.py --out) on the --table rows "
                         "below --below to --plan-out, then stop (no GPU needed)")
    ap.add_argument("--below", type=float, default=0.9, help="--mirror-cublas: rows where cuBLAS / ours < this")
    ap.add_argument("--plan-out", help="--mirror-cublas: the plan file to write")
    ap.add_argument("--table", help="a sweep table: 'best' is its row's fastest kernel")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--out-dtype", default=None, choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--layout", default="tn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-graph", action="store_true", help="time per launch between CUDA events instead")
    ap.add_argument("--out", help="write the timings as JSON here")
    args = ap.parse_args(argv)
    if args.mirror_cublas:
        if not (args.table and args.plan_out):
            ap.error("--mirror-cublas needs --table and --plan-out")
        try:
            plan = plan_from_cublas(args.mirror_cublas, args.table, args.below)
        except (OSError, ValueError, KeyError) as exc:
            ap.error(f"--mirror-cublas {args.mirror_cublas}: {exc}")
        Path(args.plan_out).write_text(json.dumps(plan, indent=1))
        print(f"wrote {args.plan_out}: {len(plan)} rows, {sum(len(v) - 1 for v in plan.values())} mirrored configurations")
        return 0
    if not args.plan:
        ap.error("give --plan (or --mirror-cublas to write one)")
    try:
        plan = json.loads(Path(args.plan).read_text())
        if not isinstance(plan, dict) or not all(isinstance(v, list) for v in plan.values()):
            raise ValueError("expected an object of MxNxK -> list of specs")
    except (OSError, ValueError) as exc:
        ap.error(f"--plan {args.plan}: {exc}")
    agent_eval._bootstrap()
    from argus_cutlass.agent.shapes import GemmShape
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.program import program_label
    from argus_cutlass.kernels.gemm.space import declared_subspace, feasible

    out_dtype = args.out_dtype or args.dtype
    space = {kernel_name(c): c for c in declared_subspace(args.dtype, out_dtype, args.layout)}
    rows: dict[str, list] = {}
    for raw, specs in plan.items():
        key = raw.lower()
        try:
            m, n, k = (int(v) for v in key.split("x"))
            if min(m, n, k) < 1:
                raise ValueError
        except ValueError:
            ap.error(f"--plan: row {raw!r} is not MxNxK of positive integers")
        rows[key] = []
        for spec in specs:
            try:
                cfg = resolve(spec, key, space, args.table)
            except ValueError as exc:
                ap.error(f"--plan row {key}: {exc}")
            ok, why = feasible(cfg)
            if not ok:
                print(f"-- {key} {spec}: argus_{program_label(cfg)} refused by the verifier: {'; '.join(why)[:300]}")
                continue
            rows[key].append(cfg)
    configs = list(dict.fromkeys(c for cs in rows.values() for c in cs))
    if not configs:
        print("nothing to build")
        return 1
    log: list = []
    libs = agent_eval._build(configs, None, log, [])
    for entry in log:
        print(f"-- {entry['kernel']}: {entry['phase']} failed: {entry['error'][:300]}")
    by_cfg = {cfg: nm for nm, (cfg, _, _) in libs.items()}
    result = {}
    for key, cfgs in rows.items():
        m, n, k = (int(v) for v in key.split("x"))
        sub = {by_cfg[c]: libs[by_cfg[c]] for c in cfgs if c in by_cfg}
        if not sub:
            continue
        shape = GemmShape(m, n, k, args.dtype, out_dtype, args.layout, name="explore")
        row = agent_eval.measure_shape(sub, shape, args.warmup, args.iters, args.rounds, log, graph=not args.no_graph)
        cub = row.get("cublas_ms")
        print(f"{key}: cuBLAS {cub * 1e3:.1f} us" if cub else f"{key}: cuBLAS not timed", flush=True)
        for nm, ms in sorted(row["kernels"].items(), key=lambda kv: (kv[1] is None, kv[1] or 0)):
            print(f"  {nm[29:]}: " + (f"{ms * 1e3:.1f} us" + (f" (cuBLAS / ours {cub / ms:.3f})" if cub else "")
                                      if ms else "not timed"), flush=True)
        result[key] = {"cublas_ms": cub, "kernels": row["kernels"],
                       "configs": {nm: libs[nm][0].model_dump() for nm in sub}}
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
