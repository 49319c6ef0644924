"""A / B timing of one MoEConfig field on MoE layers, interleaved, on a Hopper GPU.

    python3 bench/moe_ab.py --vary row_bounded=false,true [--cells qwen3-30b-a3b:16,mixtral:256,e8k2h1024i512:256]
                            [--rounds 8] [--iters 20] [--check]
    python3 bench/moe_ab.py --variants="-;tile_k=128;row_bounded=true,combine_handoff=true" [--cells ...]

``--variants``: several fields at once; variants separated by ``;``, each ``-`` (the configuration as picked) or
``FIELD=V[,FIELD=V...]`` applied together to the picked configuration (the first variant is the reference).

Each cell (``model:T`` of ``MoEProblem.for_model`` or ``e<E>k<k>h<H>i<I>:T``) starts from the configuration
``generate.configure`` picks (the shipped entry or the heuristic) and takes every value of ``--vary`` in turn; each
layer is generated and verified (``generate.generate``: a combination the configuration model or the verifier
refuses is named and skipped), compiled in one parallel nvcc batch, and timed ``--rounds`` times, the values
interleaved within each round on the same inputs (``kernels.moe.check.timed_inputs``) and one workspace: each time a
median of ``--iters`` calls (``kernels.moe.check.time_fn``: CUDA events, L2 flushed by writing 256 MB before each
call). ``--check`` first runs every layer once against the fp32 reference (uniform and skewed routing, output
poisoned). Prints one line per cell and value: the median over rounds, its ratio to the activated-weight floor of the
timed routing (``check.timed_floor_ms``), the change from the first value, and every round's time. Needs torch, nvcc
and a Hopper GPU (the session-41 row_bounded measurement, bench/data/moe_row_bounded_h200_s41.log, ran a copy of this
on unverified builds while the verifier was being extended).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from pathlib import Path

try:
    import argus_cutlass.templates  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

def parse_cell(cell: str):
    """``model:T`` or ``eEkKhHiI:T`` -> MoEProblem (``profile_moe.cell_problem``, validated).

    Raises:
        ValueError: the cell is not one of the two forms, or the problem breaks a rule of MoEProblem.
    """
    from profile_moe import cell_problem

    from argus_cutlass.errors import ArgusError

    name, sep, t = cell.partition(":")
    if not sep or not t.strip().isdigit():
        raise ValueError(f"cell {cell!r}: expected model:T or eEkKhHiI:T")
    try:
        p = cell_problem(name, int(t))
        p.validate()
        return p
    except ArgusError as exc:
        raise ValueError(f"cell {cell!r}: {exc}") from None


def parse_vary(spec: str) -> tuple[str, list]:
    """``FIELD=V1,V2`` -> (field, typed values) by MoEConfig's field types.

    Raises:
        ValueError: unknown field, fewer than two values, or a value of the wrong type.
    """
    from argus_cutlass.kernels.fields import field_value

    from argus_cutlass.kernels.moe.config import MoEConfig

    field, sep, raw = spec.partition("=")
    values_raw = [v for v in raw.split(",") if v.strip()]
    if not sep or field not in MoEConfig.model_fields:
        raise ValueError(f"--vary {spec!r}: expected FIELD=V1,V2 with FIELD a MoEConfig field")
    if len(values_raw) < 2:
        raise ValueError(f"--vary {spec!r}: an A / B comparison needs at least two values")
    return field, [field_value(MoEConfig, field, v) for v in values_raw]


def parse_variants(spec: str) -> list[tuple[str, dict]]:
    """``-;F=V;F=V,G=W`` -> [(label, {field: typed value})] (``fields.assignments``), the first the reference.

    Raises:
        ValueError: fewer than two variants, or a variant ``fields.assignments`` refuses (unknown field, wrong type).
    """
    from argus_cutlass.kernels.fields import assignments

    from argus_cutlass.kernels.moe.config import MoEConfig

    out = []
    for raw in (v.strip() for v in spec.split(";")):
        if raw:
            try:
                out.append((raw, {} if raw == "-" else assignments(MoEConfig, raw)))
            except ValueError as exc:
                raise ValueError(f"--variants {spec!r}: {exc}") from None
    if len(out) < 2:
        raise ValueError(f"--variants {spec!r}: an A / B comparison needs at least two variants")
    return out


def build_layers(problems: list, variants: list[tuple[str, dict]], labels: list[str], *,
                 heuristic: bool = False) -> tuple[dict, list]:
    """``({(cell index, variant label): loaded layer}, [each problem's Lookup])``: each problem's configuration as
    ``generate.configure`` picks it (the Lookup: config, source, why) with each variant's fields applied, generated and
    verified (a combination the configuration model or the verifier refuses is named and left out), compiled in one
    parallel nvcc batch (a failed compile named and left out), loaded. ``labels``: the cells' names for those lines.
    ``heuristic``: the heuristic's configuration (``configure(..., heuristic=True)``), not a tuned entry."""
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.generate import compile_many, configure, generate, load

    kernels = {}
    picks = [configure(p, heuristic=heuristic) for p in problems]
    for ci, p in enumerate(problems):
        base = picks[ci].config
        for v, fields in variants:
            try:
                kernels[(ci, v)] = generate(base.replace(**fields), p, smt=False)
            except (ArgusError, ValueError) as exc:
                print(f"{labels[ci]} {v}: refused ({str(exc).splitlines()[0]})", flush=True)
    arts = compile_many(list(kernels.values()))
    libs = {}
    for k, a in zip(kernels, arts):
        if isinstance(a, Exception):
            print(f"{labels[k[0]]} {k[1]}: compile failed ({str(a).splitlines()[0]})", flush=True)
        else:
            libs[k] = load(kernels[k], a)
    return libs, picks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--vary", metavar="FIELD=V1,V2", help="the MoEConfig field and its values")
    what.add_argument("--variants", metavar="-;F=V,G=W;...", help="variants of several fields each (see above)")
    ap.add_argument("--cells", default="qwen3-30b-a3b:16,deepseek-v2-lite:16,mixtral:16,qwen3-30b-a3b:256,"
                                       "deepseek-v2-lite:256,mixtral:256")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--check", action="store_true", help="check every layer against the fp32 reference first")
    args = ap.parse_args(argv)
    try:
        if args.vary:
            field, vals = parse_vary(args.vary)
            variants = [(f"{field}={v}", {field: v}) for v in vals]
        else:
            variants = parse_variants(args.variants)
        problems = [parse_cell(c) for c in args.cells.split(",") if c]
    except ValueError as exc:
        ap.error(str(exc))
    try:
        import torch
    except ImportError:
        ap.error("needs torch (a CUDA build) and a Hopper GPU: it times layers")
    if not torch.cuda.is_available():
        ap.error("needs a Hopper GPU: torch sees no CUDA device")

    libs, _ = build_layers(problems, variants, args.cells.split(","))

    from argus_cutlass.kernels.moe.check import run_and_check, time_fn, timed_floor_ms, timed_inputs

    for ci, p in enumerate(problems):
        mine = [v for v, _ in variants if (ci, v) in libs]
        if not mine:
            continue
        cell = args.cells.split(",")[ci]
        gc.collect()   # tensors a reference cycle still holds (session 47: 71 GB held at a fifth cell, an OOM)
        torch.cuda.empty_cache()
        print(f"{cell}: {torch.cuda.memory_allocated() / 2**30:.1f} GiB held by PyTorch before the cell", flush=True)
        if args.check:
            for v in mine:
                for routing in ("uniform", "skewed"):
                    chk = run_and_check(libs[(ci, v)], p, routing=routing)
                    print(f"{cell} {v} {routing}: err {chk.err:.3g} (bound {chk.bound:.3g}) "
                          f"{'ok' if chk.ok else 'WRONG'}", flush=True)
        x, ids, w, w13, w2 = timed_inputs(p)
        ws = torch.empty(max(libs[(ci, v)].workspace_bytes(p.tokens) for v in mine), dtype=torch.uint8, device="cuda")
        times = {v: [] for v in mine}
        for _ in range(args.rounds):
            for v in mine:
                lib = libs[(ci, v)]
                times[v].append(time_fn(lambda: lib.forward(x, ids, w, w13, w2, workspace=ws, padding="unchecked"),
                                        warmup=5, iters=args.iters))
        floor = timed_floor_ms(p)
        first = statistics.median(times[mine[0]])
        for v in mine:
            med = statistics.median(times[v])
            print(f"{cell} {v}: {med * 1e3:.1f} us ({med / floor:.3f}x floor {floor * 1e3:.1f} us) "
                  f"{100 * (med - first) / first:+.1f} %; rounds {[round(t * 1e3, 1) for t in times[v]]}", flush=True)
        del x, ids, w, w13, w2, ws
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
