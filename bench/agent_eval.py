"""Evaluate the tuning agent against exhaustive and random search on a measured table.

Run on one H200 (one call of a few minutes; needs nvcc, the CUTLASS headers, cuda-python,
numpy, pydantic, jinja2, and torch for the cuBLAS baseline)::

    python3 bench/agent_eval.py --out $OUT

Phases:

1. **Sub-space**: :func:`subspace` declares 113 configurations (75 in the run of issue 4, 88 until session 29, 95 in it, 106 since session 30, 110 since session 33, 113 since session 35), stages fitted to shared
   memory; the verifier prunes it first (count reported).
2. **Compile** the feasible ones in parallel and **check** each kernel's numerics on two small
   problems with residues, in one orchestrator batch (``argus_cutlass.generate.run_many``: one
   nvcc per core; raster and swizzle are baked into the source, so each is its own kernel); a
   kernel that fails to verify, compile or check is recorded as failed, never a crash.
4. **Measure** every passing kernel on every shape of ``bench/test_gemm_bench.py::SHAPES``
   in ``--rounds`` rounds (CUDA events, median of ``--iters`` launches after ``--warmup``;
   kernel order rotated each round; operands rotated over 3x L2) and cuBLAS (torch) in the
   same process between rounds; medians over rounds (:func:`measure_shape`, shared with
   ``bench/sweep_gemm.py``). Swap-AB kernels are not timed on M > 256
   (``argus_cutlass.agent.costmodel.SWAP_AB_MAX_M``; they tile M by 16..64 there and are far
   slower). Saved to ``$OUT/agent_eval_table.json`` after each shape.
5. **Replay** against that table: (a) exhaustive best, (b) random search (``--seeds``
   permutations), (c) the default policy (seeded, action values shared across the shapes of
   one seed) with the same budget; report the measured candidates each needs to reach
   >= 98% of (a)'s best speed (median over seeds, then over shapes), the tuned geomean of
   cuBLAS time / ours over the table and the minimum, for (a) and for the policy's best
   within ``--budget`` candidates.
6. Write ``$OUT/tuned_h200.json`` (the format of ``agent/tuned_h200.json``) and
   ``$OUT/agent_eval_summary.json``; print the summary table last.

``--replay TABLE.json`` skips phases 1-4 and replays a saved table (CPU only).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: reach this fraction of the exhaustive best speed
TARGET = 0.98


def _bootstrap() -> None:
    """Import ``argus_cutlass`` from this checkout (not a stale installed copy); the package
    maps the checkout's ``agent/``, ``templates/`` and ``invariants/`` into its namespace."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import argus_cutlass

    if Path(argus_cutlass.__file__).resolve().parent != ROOT / "argus_cutlass":
        print(f"warning: argus_cutlass imported from {argus_cutlass.__file__}, not {ROOT}", file=sys.stderr)


_bootstrap()
# the rotation and graph-timing rules of the product's own GEMM timing (kernels.gemm.check.time_gemm): bytes of
# rotated operands (3 x the H200's 60 MB L2), at most MAX_SETS sets, graphs of GRAPH_CALLS or more launches (a
# whole number of rotations); time_graph: the torch graph timer (ours and cuBLAS in one torch capture)
from argus_cutlass.generate import GRAPH_CALLS, MAX_SETS, ROTATE_BYTES, graph_calls  # noqa: E402,F401
from argus_cutlass.generate import torch_graph_ms as time_graph  # noqa: E402


def bench_shapes() -> list[tuple[int, int, int]]:
    """``SHAPES`` of ``bench/test_gemm_bench.py``, read without importing it (no torch needed)."""
    tree = ast.parse((ROOT / "bench" / "test_gemm_bench.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SHAPES" for t in node.targets):
            return [tuple(s) for s in ast.literal_eval(node.value)]
    raise RuntimeError("SHAPES not found in bench/test_gemm_bench.py")


def shape_key(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


def subspace(dtype: str = "bf16", out_dtype: str = "bf16", layout: str = "tn") -> list:
    """The declared sub-space: :func:`argus_cutlass.kernels.gemm.space.declared_subspace`."""
    from argus_cutlass.kernels.gemm.space import declared_subspace

    return declared_subspace(dtype, out_dtype, layout)


# ---- measurement (GPU) --------------------------------------------------------------------------


#: sizes of the numerics check of every candidate (residues in every mode)
CHECK_SHAPES = ((1, 264, 128), (328, 784, 520))


def check_shapes(dtype: str, out_dtype: str, layout: str) -> tuple[tuple[int, int, int], ...]:
    """:data:`CHECK_SHAPES` the direct TMA path runs in this flavor: where M is a contiguous mode (layout
    ``nt`` / ``nn``), M = 1 breaks TMA's 16-byte rule, so that check runs at M = 8 (the kernels are built
    without aligned staging; session 23's review found every ``nt`` kernel failing its check on M = 1).

    >>> check_shapes("bf16", "bf16", "tn"), check_shapes("bf16", "bf16", "nt")[0]
    (((1, 264, 128), (328, 784, 520)), (8, 264, 128))
    """
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    out = []
    for m, n, k in CHECK_SHAPES:
        for mm in (m, 8):
            try:
                GemmProblem(mm, n, k, dtype, out_dtype, layout).validate()
            except ArgusError:
                continue
            out.append((mm, n, k))
            break
    return tuple(out)


def _build(configs: list, workers: int, log: list, notes: list) -> dict:
    """kernel name -> (config, GemmKernelLibrary, artifact) for the configs that verify, compile
    and pass the numerics check on :data:`CHECK_SHAPES`; every failure is logged with its phase.
    One orchestrator batch (:func:`argus_cutlass.generate.run_many`): one nvcc per worker, the
    reference GEMM built in the same batch."""
    from argus_cutlass.generate import Options, run_many
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    c0 = configs[0]
    problem = GemmProblem(*CHECK_SHAPES[-1], c0.dtype, c0.out_dtype, c0.layout)
    shapes = check_shapes(c0.dtype, c0.out_dtype, c0.layout)
    options = Options(smt=None, time=False, baseline=False, check_shapes=shapes, seed=1, workers=workers)
    t0 = time.perf_counter()
    results = run_many(configs, problem, options=options)
    print(f"generated, compiled and checked {len(results)} kernels in {time.perf_counter() - t0:.0f} s", flush=True)
    phase = {"rejected": "verify", "unproved": "verify", "render_error": "render", "compile_error": "compile",
             "launch_error": "check", "check_failed": "check"}
    libs = {}
    for r in results:
        notes += [n for n in r.notes if n not in notes]
        if r.status == "checked":
            libs[r.name] = (r.config, r.library, r.artifact)
            continue
        error = ("; ".join(c.summary() for c in r.checks if not c.passed) if r.status == "check_failed"
                 else str(r.error)[:1000] if r.error is not None else f"stopped at {r.status}: {r.skipped}")
        log.append({"kernel": r.name or r.config.model_dump(), "phase": phase.get(r.status, r.status),
                    "error": error})
    return libs


def _operand_sets(problem: Any, torch: Any) -> list[dict[str, Any]]:
    """Rotated operand sets of ``problem``: flat torch buffers A, B (random normal) and D, each as large as
    the problem's storage (:meth:`GemmProblem.operands`), enough sets for :data:`ROTATE_BYTES`."""
    from argus_cutlass.kernels.gemm.problem import storage_rows

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    ops = problem.operands()
    size = {n: ops[n].storage_bytes for n in ("A", "B", "D")}
    # at least whole rows of the leading dimension (the views of problem.layout_views), 2-byte inputs
    a_rows, b_rows = storage_rows(problem)
    size["A"] = max(size["A"], 2 * problem.lda * a_rows)
    size["B"] = max(size["B"], 2 * problem.ldb * b_rows)
    per_set = sum(size.values())
    count = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / per_set)))
    sets = []
    for _ in range(count):
        s = {n: torch.randn(size[n] // 2, device="cuda", dtype=tdt[problem.dtype]) for n in ("A", "B")}
        s["D"] = torch.empty(size["D"], device="cuda", dtype=torch.uint8)
        sets.append(s)
    return sets


def select(names: list[str], spec: str) -> list[str]:
    """The names matching any ``+``-joined selector of the comma-separated ``spec``, in ``names``' order: every
    part of a selector is a substring of the name, or, written ``!text``, is not (``64x16x64_c1x1_s12_pp+!_as``:
    that kernel with one accumulator set, not its ``_as2`` twin).

    Raises:
        ValueError: a selector matches no name, or has an empty part (``a++b``, a bare ``!``, ``!!x``: each would
            select every kernel), its text in the message.

    >>> select(["a_splitk2_x", "a_splitk4_x", "b_x"], "splitk2,b+x")
    ['a_splitk2_x', 'b_x']
    >>> select(["k_s12_pp_1", "k_s12_pp_as2_1"], "s12_pp+!_as")
    ['k_s12_pp_1']
    """
    picked: list[str] = []
    for sel in (s for s in spec.split(",") if s.strip()):
        parts = sel.split("+")
        if any(not p.removeprefix("!") or p.startswith("!!") for p in parts):
            raise ValueError(f"selector {sel!r} has an empty part (parts: text or !text, joined by +)")
        hit = [nm for nm in names
               if all((p[1:] not in nm) if p.startswith("!") else (p in nm) for p in parts)]
        if not hit:
            raise ValueError(f"selector {sel!r} matches no kernel of the declared sub-space")
        picked += [nm for nm in hit if nm not in picked]
    return [nm for nm in names if nm in picked]



def measure_shape(libs: dict, shape: Any, warmup: int, iters: int, rounds: int, log: list,
                  graph: bool = False, host_calls: int = 0) -> dict[str, Any]:
    """One shape's row (``shape``: an :class:`argus_cutlass.agent.shapes.GemmShape`): every kernel of
    ``libs`` (name -> (config, library, artifact); swap-AB ones only on M <= ``SWAP_AB_MAX_M``, tens of
    times slower above, recorded None) and cuBLAS (torch), interleaved in ``rounds`` rounds (cuBLAS before
    every round and after the last; each round starts the kernel list at another point), each a median
    of ``iters`` CUDA-event launches after ``warmup``, over rotated operands (:func:`_operand_sets`);
    medians over the rounds. ``graph``: each timing is instead :func:`time_graph` of a graph of
    ``GRAPH_CALLS`` or more back-to-back launches (a whole number of rotations), per launch, about ``iters``
    launches in all (at least 5 replays).
    ``host_calls``: also the host's cost of one call (``host_us``: name or ``cublas`` -> microseconds of wall
    time per call over ``host_calls`` back-to-back calls, nothing synchronized in between; a kernel shorter than
    that is timed partly by the host in the per-launch mode). Per-kernel failures go to ``log``."""
    import torch

    from argus_cutlass.agent.costmodel import SWAP_AB_MAX_M
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.gemm.problem import layout_views
    from argus_cutlass.runtime.check import time_kernel as time_events

    problem = shape.problem().validate()
    m, n, k = problem.m, problem.n, problem.k
    sets = _operand_sets(problem, torch)
    ptrs = [(s["A"].data_ptr(), s["B"].data_ptr(), s["D"].data_ptr()) for s in sets]
    views = [layout_views(s["A"], s["B"], problem) for s in sets]
    out_dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[problem.out_dtype]
    same_out = out_dt == views[0][0].dtype
    turn = [0]

    def ours(lib: Any) -> None:
        a, b, d = ptrs[turn[0] % len(ptrs)]
        turn[0] += 1
        # per launch: the legacy default stream as before session 27 (an int: no per-call stream object, whose
        # host cost would count against ours alone); from a graph: torch's current (side / capture) stream
        lib(a, b, None, d, m, n, k, problem.lda, problem.ldb, problem.ldd, problem.ldd, 1.0, 0.0,
            torch.cuda.current_stream().cuda_stream if graph else 0)

    def cublas() -> None:
        a, b = views[turn[0] % len(views)]
        turn[0] += 1
        if same_out:
            torch.mm(a, b)
        else:
            torch.mm(a, b, out_dtype=out_dt)

    calls = graph_calls(len(ptrs))

    def time_kernel(fn: Any, warmup: int, iters: int) -> float:
        if graph:   # about ``iters`` launches in all: replays of ``calls`` launches each (at least 5)
            return time_graph(fn, calls, max(1, warmup // calls), max(5, math.ceil(iters / calls)))
        return time_events(fn, warmup=warmup, iters=iters)

    names = [nm for nm in libs if not (libs[nm][0].swap_ab and m > SWAP_AB_MAX_M)]
    runs: dict[str, list[float] | None] = {nm: [] for nm in names}
    cub: list[float] = []

    def time_cublas() -> None:
        try:
            cub.append(time_kernel(cublas, warmup=warmup, iters=iters))
        except Exception as exc:  # noqa: BLE001 - a torch refusal (e.g. no out_dtype) is logged, not fatal
            log.append({"kernel": "cublas", "phase": "time", "shape": shape.label, "error": str(exc)[:500]})

    for r in range(rounds):
        time_cublas()
        start = (r * len(names)) // max(rounds, 1)
        for nm in names[start:] + names[:start]:
            if runs[nm] is None:
                continue
            try:
                runs[nm].append(time_kernel(lambda lib=libs[nm][1]: ours(lib), warmup=warmup, iters=iters))
            except (ArgusError, RuntimeError) as exc:   # RuntimeError: torch's capture_end after a launch failed
                runs[nm] = None
                log.append({"kernel": nm, "phase": "time", "shape": shape.label, "error": str(exc)[:500]})
                if graph:   # a failed capture may leave a launch error behind: a sticky one ends the run here
                    torch.cuda.synchronize()
    time_cublas()
    torch.cuda.synchronize()
    host = {}
    if host_calls:   # host enqueue cost per call: back-to-back calls, no synchronization until the last
        for nm, fn in [(nm, lambda lib=libs[nm][1]: ours(lib)) for nm in names if runs[nm]] + [("cublas", cublas)]:
            t0 = time.perf_counter()
            for _ in range(host_calls):
                fn()
            host[nm] = (time.perf_counter() - t0) / host_calls * 1e6
            torch.cuda.synchronize()
    nsets = len(ptrs)
    for held in (sets, views, ptrs):   # free the operands before the next shape allocates its own
        held.clear()
    torch.cuda.empty_cache()
    kernels = {nm: (statistics.median(v) if v else None) for nm, v in runs.items()}
    kernels.update({nm: None for nm in libs if nm not in kernels})
    return {"kernels": kernels, "cublas_ms": statistics.median(cub) if cub else None, "cublas_rounds": cub,
            "operand_sets": nsets, "names": list(shape.names), **({"graph_calls": calls} if graph else {}),
            **({"host_us": host} if host_calls else {})}


def _measure(libs: dict, shapes: list, warmup: int, iters: int, out: Path, table: dict, log: list,
             rounds: int = 3) -> None:
    """Time every kernel on every shape (:func:`measure_shape`), the table saved after each shape."""
    from argus_cutlass.agent.shapes import GemmShape

    for shape in shapes:
        t0 = time.perf_counter()
        key = shape_key(shape)
        row = measure_shape(libs, GemmShape(*shape, name=f"bench.{key}"), warmup, iters, rounds, log)
        table["shapes"][key] = row
        ok = [v for v in row["kernels"].values() if v]
        print(f"measured {key}: {len(ok)} kernels in {time.perf_counter() - t0:.1f} s, best "
              f"{min(ok) if ok else float('nan'):.4f} ms, cuBLAS {row['cublas_ms']}", flush=True)
        (out / "agent_eval_table.json").write_text(json.dumps(table, indent=1))


# ---- replay (CPU) -------------------------------------------------------------------------------


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def replay(table: dict, budget: int = 16, seeds: int = 5, random_seeds: int = 50) -> dict:
    """Replay exhaustive, random and default-policy search against a measured table.

    Args:
        table: ``{"candidates": [GemmConfig dicts (feasible)], "shapes": {"MxNxK":
            {"kernels": {kernel name: ms or None}, "cublas_ms": ms or None}}}``.
        budget: candidates the policy may measure for the "tuned" figures.
        seeds: default-policy seeds; random_seeds: random permutations.

    Returns:
        per-shape rows and the summary (medians, geomeans, minima). A search that never
        reaches the target counts as ``N + 1`` (N = the number of candidates).
    """
    from argus_cutlass.agent.measure import TableEvaluator, table_key
    from argus_cutlass.agent.planner import ActionValues, DefaultPolicy, Problem, run_episode
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.space import GemmSpace

    cands = [GemmConfig(**c) for c in table["candidates"]]
    if not cands or not table.get("shapes"):
        nan = float("nan")
        return {"rows": {}, "summary": {
            "shapes": 0, "candidates": len(cands), "budget": budget, "target": TARGET,
            "median_count": {"exhaustive": nan, "random": nan, "default_policy": nan},
            "geomean_vs_cublas": {"exhaustive": nan, "default_policy": nan},
            "min_vs_cublas": {"exhaustive": None, "default_policy": None}}}
    measured = next(iter(table["shapes"].values()))["kernels"]
    names = [table_key(c, measured) or kernel_name(c) for c in cands]  # older tables: by label
    space = GemmSpace.from_configs(cands)
    n_cand = len(cands)
    rows = {}
    policy_counts: dict[str, list[int]] = {k: [] for k in table["shapes"]}
    policy_best: dict[str, list[float]] = {k: [] for k in table["shapes"]}
    for seed in range(seeds):
        values = ActionValues()  # learned across the shapes (episodes) of this seed
        for key, row in table["shapes"].items():
            ms = {nm: row["kernels"].get(nm) for nm in names}
            good = [v for v in ms.values() if v]
            if not good:
                continue
            target = min(good) / TARGET
            m, n, k = map(int, key.split("x"))
            problem = Problem(m, n, k, cands[0].dtype, cands[0].out_dtype, cands[0].layout)
            full = run_episode(problem, space, DefaultPolicy(values=values, seed=seed), TableEvaluator(ms), n_cand)
            hit = full.evaluations_to_reach(target)
            policy_counts[key].append(hit if hit is not None else n_cand + 1)
            measured_ok = [s.ms for s in full.measured[:budget] if s.ms]
            policy_best[key].append(min(measured_ok) if measured_ok else float("inf"))
    for key, row in table["shapes"].items():
        ms = {nm: row["kernels"].get(nm) for nm in names}
        good = {nm: v for nm, v in ms.items() if v}
        if not good:
            rows[key] = {"measured": 0}
            continue
        best_name = min(good, key=good.get)  # type: ignore[arg-type]
        best = good[best_name]
        target = best / TARGET
        rand = []
        for s in range(random_seeds):
            order = names[:]
            random.Random(s).shuffle(order)
            hit = next((i for i, nm in enumerate(order, 1) if ms[nm] and ms[nm] <= target), n_cand + 1)
            rand.append(hit)
        cub = row.get("cublas_ms")
        pol_ms = _median(policy_best[key])
        rows[key] = {
            "candidates": n_cand, "measured_ok": len(good), "best_kernel": best_name, "best_ms": best,
            "best_config": cands[names.index(best_name)].model_dump(), "cublas_ms": cub,
            "exhaustive_count": n_cand, "random_count": _median(rand),
            "policy_count": _median(policy_counts[key]), "policy_best_ms": pol_ms,
            "ratio_exhaustive": (cub / best) if cub else None,
            "ratio_policy": (cub / pol_ms) if cub and math.isfinite(pol_ms) else None,
        }
    ok_rows = [r for r in rows.values() if r.get("measured_ok")]
    summary = {
        "shapes": len(ok_rows), "candidates": n_cand, "budget": budget, "target": TARGET,
        "median_count": {"exhaustive": _median([r["exhaustive_count"] for r in ok_rows]),
                         "random": _median([r["random_count"] for r in ok_rows]),
                         "default_policy": _median([r["policy_count"] for r in ok_rows])},
        "geomean_vs_cublas": {"exhaustive": _geomean([r["ratio_exhaustive"] for r in ok_rows]),
                              "default_policy": _geomean([r["ratio_policy"] for r in ok_rows])},
        "min_vs_cublas": {
            "exhaustive": min((r["ratio_exhaustive"] for r in ok_rows if r["ratio_exhaustive"]), default=None),
            "default_policy": min((r["ratio_policy"] for r in ok_rows if r["ratio_policy"]), default=None)},
    }
    return {"rows": rows, "summary": summary}


def tuned_entries(result: dict, gpu: str) -> dict:
    """The measured bests in the format of ``agent/tuned_h200.json``."""
    from argus_cutlass.agent.planner import Problem
    from argus_cutlass.agent.store import make_entry
    from argus_cutlass.kernels.gemm.config import GemmConfig

    entries = []
    for key, r in result["rows"].items():
        if not r.get("measured_ok"):
            continue
        cfg = GemmConfig(**r["best_config"])
        m, n, k = map(int, key.split("x"))
        entries.append(make_entry(gpu, "gemm", Problem(m, n, k, cfg.dtype, cfg.out_dtype, cfg.layout),
                                  cfg, r["best_ms"], r["cublas_ms"]))
    return {"note": f"measured by bench/agent_eval.py on {gpu} ({time.strftime('%Y-%m-%d')}); "
                    "exhaustive best of the declared sub-space per shape", "gpu": gpu, "entries": entries}


def format_summary(result: dict) -> str:
    """The compact table printed last."""
    lines = [f"{'shape':>20} {'best kernel':>64} {'best ms':>9} {'cuBLAS':>9} {'ratio':>6} "
             f"{'pol.ratio':>9} {'#exh':>5} {'#rand':>6} {'#pol':>5}"]
    for key, r in result["rows"].items():
        if not r.get("measured_ok"):
            lines.append(f"{key:>20} (no kernel measured)")
            continue
        fmt = lambda x, f: (format(x, f) if isinstance(x, (int, float)) and x is not None else "-")  # noqa: E731
        lines.append(f"{key:>20} {r['best_kernel'][-64:]:>64} {r['best_ms']:9.4f} {fmt(r['cublas_ms'], '9.4f'):>9} "
                     f"{fmt(r['ratio_exhaustive'], '6.3f'):>6} {fmt(r['ratio_policy'], '9.3f'):>9} "
                     f"{r['exhaustive_count']:5d} {r['random_count']:6.1f} {r['policy_count']:5.1f}")
    s = result["summary"]
    mc, gm, mn = s["median_count"], s["geomean_vs_cublas"], s["min_vs_cublas"]
    lines.append(f"candidates to reach {s['target']:.0%} of the exhaustive best (median over shapes): "
                 f"exhaustive {mc['exhaustive']}, random {mc['random']}, default policy {mc['default_policy']}")
    lines.append(f"cuBLAS time / ours, geomean (min): exhaustive {gm['exhaustive']:.3f} ({mn['exhaustive']}), "
                 f"default policy @ budget {s['budget']} {gm['default_policy']:.3f} ({mn['default_policy']})")
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder ($OUT on the device)")
    ap.add_argument("--workers", type=int, default=None, help="parallel nvcc (default: CPU count)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3,
                    help="timing rounds per shape (kernel order rotated each round; cuBLAS between rounds)")
    ap.add_argument("--budget", type=int, default=16, help="policy budget for the tuned figures")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--replay", default=None, help="replay a saved agent_eval_table.json (no GPU)")
    ap.add_argument("--limit", type=int, default=None,
                    help="smoke test: only the first LIMIT candidates and LIMIT shapes")
    args = ap.parse_args(argv)
    _bootstrap()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log: list[dict] = []
    if args.replay:
        table = json.loads(Path(args.replay).read_text())
    else:
        from argus_cutlass.kernels.gemm.space import feasible
        from argus_cutlass.runtime.cuda import require_sm90

        info = require_sm90()
        declared = subspace()[: args.limit] if args.limit else subspace()
        verdicts = [(c, *feasible(c)) for c in declared]
        cands = [c for c, ok, _ in verdicts if ok]
        for c, ok, why in verdicts:
            if not ok:
                log.append({"kernel": c.model_dump(), "phase": "verify", "error": "; ".join(why)})
        print(f"sub-space: {len(declared)} declared, {len(declared) - len(cands)} pruned by the verifier, "
              f"{len(cands)} to compile", flush=True)
        table = {"gpu": info.name, "declared": len(declared), "pruned": len(declared) - len(cands),
                 "candidates": [c.model_dump() for c in cands], "shapes": {}, "failures": log,
                 "warmup": args.warmup, "iters": args.iters, "rounds": args.rounds, "notes": []}
        try:
            libs = _build(cands, args.workers or 16, log, table["notes"])
            table["passed"] = sorted(libs)
            table["resources"] = {n: {"registers": a.registers, "spill_bytes": a.spill_bytes}
                                  for n, (_, _, a) in libs.items()}
            print(f"{len(libs)} kernels passed the numerics check", flush=True)
            shapes = bench_shapes()[: args.limit] if args.limit else bench_shapes()
            _measure(libs, shapes, args.warmup, args.iters, out, table, log, rounds=args.rounds)
        except Exception:  # noqa: BLE001 - keep what was measured; the replay still runs
            log.append({"phase": "fatal", "error": traceback.format_exc()[-3000:]})
            print(traceback.format_exc(), file=sys.stderr)
        (out / "agent_eval_table.json").write_text(json.dumps(table, indent=1))
    result = replay(table, budget=args.budget, seeds=args.seeds)
    result["summary"]["declared"] = table.get("declared")
    result["summary"]["pruned_by_verifier"] = table.get("pruned")
    result["summary"]["failures"] = len(table.get("failures", []))
    (out / "agent_eval_summary.json").write_text(json.dumps(result, indent=1))
    (out / "tuned_h200.json").write_text(json.dumps(tuned_entries(result, table.get("gpu", "NVIDIA H200")), indent=1))
    print(f"declared {table.get('declared')}, pruned by the verifier {table.get('pruned')}, "
          f"failures {len(table.get('failures', []))} (see agent_eval_table.json)")
    for note in table.get("notes", []):
        print(f"note: {note}")
    print(format_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
