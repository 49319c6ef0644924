"""Build every planted mistake of the MoE catalogue WITHOUT the verifier; run it on a Hopper GPU.

    python3 bench/mutants_moe_gpu.py --out OUTDIR [--ids a,b] [--timeout 60] [--jobs N] [--skip-large]

For each mutant of ``argus_cutlass/testing/mutants_moe.toml`` and the unmutated layer of each base
it runs on (the baselines, which must pass): render the layer (``render_moe``, no verifier), build
all of them in one parallel nvcc batch (``--jobs``), then run each in its own spawned process (a
hung kernel or a sticky CUDA fault kills only that process; ``--timeout`` seconds per problem)
on its problems (``argus_cutlass.testing.mutants_moe.GPU_PROBLEMS``: the base's 300-token default
plus the problems the entry names, e.g. groups of exactly 128 rows for ``rank_off_by_one``, 2048
skewed tokens for ``gu_step_delta``, T = 2^19 + 256 at H = 4096 for the int32 index mutants). The
output y AND the workspace are poisoned (0xFF bytes: NaN) before every run, so a tile the kernel
skips cannot inherit correct data from an earlier run in the same allocator block.

Outcomes per kernel: ``compile_error``, ``crashed`` (launch error / device fault), ``hung``,
``wrong`` (silicon shows the mistake), ``silent`` (correct on every problem), ``ok`` (baselines).
Writes ``OUTDIR/mutants_moe_gpu.json`` and ``.md``; exit 1 when a baseline is not ``ok``.
``--skip-large`` leaves out ``wide_int32_wrap`` (13 GB of device memory, ~1 min with its inputs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

try:
    import argus_cutlass.templates  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from argus_cutlass.testing.mutants_moe import (  # noqa: E402
    GPU_PROBLEMS,
    base_layer,
    gpu_problems_of,
    load_moe_catalogue,
    mutant_layer,
    unverified_job,
)

SETUP_TIMEOUT_S = 120.0


def _inputs(problem, routing: str, sizes, seed: int):
    """(x, ids, w, w13, w2) on the GPU; large T draws x on the device (a CPU randn of 2^31 values
    would take a minute)."""
    import torch

    from argus_cutlass.kernels.moe.check import make_inputs
    from argus_cutlass.hw.routing import make_routing

    if problem.tokens * problem.hidden < 2**26:
        return make_inputs(problem, routing, seed, sizes)
    p = problem
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = torch.bfloat16 if p.dtype == "bf16" else torch.float16
    x = torch.randn(p.tokens, p.hidden, generator=g, device="cuda", dtype=dt)
    w13 = (torch.randn(p.experts, 2 * p.ffn, p.hidden, generator=g, device="cuda") / p.hidden ** 0.5).to(dt)
    w2 = (torch.randn(p.experts, p.hidden, p.ffn, generator=g, device="cuda") / p.ffn ** 0.5).to(dt)
    ids, w = make_routing(routing, p.tokens, p.experts, p.topk, seed=seed, sizes=sizes)
    return x, torch.from_numpy(ids).cuda(), torch.from_numpy(w).cuda(), w13, w2


def _cancelling(x, w, w13, w2):
    """The inputs of a ``GpuProblem.cancel`` problem: every expert's weights = expert 0's, x scaled by
    ``CANCEL_X_SCALE``, topk weights +1/3, -1/3 per slot pair (0 for an odd last slot)."""
    import torch

    from argus_cutlass.testing.mutants_moe import CANCEL_X_SCALE

    k = w.shape[1]
    signs = torch.tensor([(1.0 if j % 2 == 0 else -1.0) if j < k - k % 2 else 0.0 for j in range(k)],
                         device=w.device)
    return ((x.float() * CANCEL_X_SCALE).to(x.dtype), (signs / 3.0).expand_as(w).contiguous(),
            w13[:1].expand_as(w13).contiguous(), w2[:1].expand_as(w2).contiguous())


def _child(conn: Any, so_path: str, name: str, layer: Any, problems: list[str], seed: int) -> None:
    started = False
    try:
        import torch

        from argus_cutlass.kernels.moe.check import fp32_layer
        from argus_cutlass.kernels.moe.library import MoEKernelLibrary
        from argus_cutlass.kernels.moe.problem import MoEProblem

        lib = MoEKernelLibrary(so_path, name, layer)
        conn.send({"ready": True})
        for label in problems:
            gp = GPU_PROBLEMS[label]
            conn.send({"start": label})
            started = True
            t0 = time.perf_counter()
            p = MoEProblem(gp.tokens, layer.experts, layer.topk, layer.hidden, layer.ffn, layer.dtype)
            x, ids, w, w13, w2 = _inputs(p, gp.routing, gp.sizes, seed)
            if gp.cancel:   # GpuProblem.cancel: identical experts, weights +-1/3 per slot pair: y = 0
                x, w, w13, w2 = _cancelling(x, w, w13, w2)
            for t, slot in gp.invalid:  # -1 padding the kernel must skip (GpuProblem.invalid)
                ids[t, slot % p.topk] = -1
            ws = torch.full((lib.workspace_bytes(p.tokens),), 0xFF, dtype=torch.uint8, device="cuda")
            y = torch.full_like(x, float("nan"))
            try:
                lib(x, ids.int().contiguous(), w.float().contiguous(), w13, w2, y, ws, p.tokens,
                    torch.cuda.current_stream().cuda_stream)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a launch error or a device fault is an outcome
                conn.send({"problem": label, "outcome": "crashed", "detail": f"{type(exc).__name__}: {exc}"[:800]})
                break
            if gp.sample is None:
                sel = torch.arange(p.tokens, device="cuda")
            else:
                head, tail = gp.sample
                sel = torch.cat([torch.arange(head, device="cuda"),
                                 torch.arange(p.tokens - tail, p.tokens, device="cuda")])
            ref = fp32_layer(x[sel], ids[sel], w[sel], w13, w2)
            err = float((y[sel].float() - ref).abs().max())
            ok = err == err and err < 3e-2
            conn.send({"problem": label, "outcome": "ok" if ok else "wrong", "max_err": err,
                       "seconds": round(time.perf_counter() - t0, 2)})
            del x, y, ws
            torch.cuda.empty_cache()
    except BaseException as exc:  # noqa: BLE001
        conn.send({"problem": "?" if started else "setup", "outcome": "crashed" if started else "error",
                   "detail": f"{type(exc).__name__}: {str(exc)[:800]}"})
    finally:
        conn.send(None)
        conn.close()
        os._exit(0)


def run_job(so_path: str, name: str, layer: Any, problems: list[str], timeout_s: float,
            seed: int = 11) -> list[dict]:
    """Run one built layer over ``problems`` in a spawned child; a problem silent for ``timeout_s``
    is ``hung`` and the child is killed."""
    from argus_cutlass.testing.gpu import run_child_protocol

    def limit(problem: str) -> float:  # the int32-wrap problem draws 13 GB of inputs and an fp32 reference first
        return timeout_s * (4 if GPU_PROBLEMS[problem].tokens > 100_000 else 1)

    return run_child_protocol(_child, (so_path, name, layer, problems, seed), setup_timeout_s=SETUP_TIMEOUT_S,
                              problem_timeout_s=limit)


_SEVERITY = ("error", "compile_error", "hung", "crashed", "wrong", "ok")


def _overall(rows: list[dict]) -> str:
    for o in _SEVERITY:
        if any(r["outcome"] == o for r in rows):
            return o
    return "error"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ids", default="", help="comma-separated mutant ids (default: all)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds one problem may run")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: CPU count)")
    ap.add_argument("--skip-large", action="store_true", help="leave out the 13 GB int32-wrap problem")
    args = ap.parse_args(argv)
    from argus_cutlass.build.nvcc import CompileError, compile_many
    from argus_cutlass.errors import ArgusError

    cat = load_moe_catalogue()
    ids = [s for s in args.ids.split(",") if s]
    unknown = sorted(set(ids) - set(cat))
    if unknown:
        ap.error(f"unknown mutant id(s) {unknown}")
    chosen = [m for m in cat.values() if not ids or m.id in ids]
    t0 = time.perf_counter()

    named = {m.id: gpu_problems_of(m) for m in chosen}   # each mutant's silicon problems, looked up once
    ran = {mid: [p for p in ps if not (args.skip_large and GPU_PROBLEMS[p].tokens > 100_000)]
           for mid, ps in named.items()}

    # jobs: (id, cls, layer, problems); one baseline per silicon base, over the union of its problems
    jobs: list[tuple[str, str, Any, list[str], dict]] = []
    bases: dict[str, tuple[Any, list[str]]] = {}
    results: list[dict] = []
    for m in chosen:
        if not named[m.id]:   # a catalogue entry without a silicon problem: said, not a crash of the run
            results.append({"id": m.id, "rule": m.rule, "cls": m.cls, "story": m.story, "outcome": "no_problem",
                            "detail": "no silicon problem names this mutant (catalogue gpu_problems)"})
            continue
        bname = m.gpu_base_name or GPU_PROBLEMS[named[m.id][0]].base
        layer, plist = bases.setdefault(bname, (base_layer(m, gpu=True), []))
        plist.extend(p for p in ran[m.id] if p not in plist)
    for bname, (layer, plist) in bases.items():
        if plist:
            jobs.append((f"base_{bname}", "baseline", layer, plist, {}))
    for m in chosen:
        if ran[m.id]:
            jobs.append((m.id, m.cls, mutant_layer(m, gpu=True), ran[m.id],
                         {"rule": m.rule, "cls": m.cls, "story": m.story}))
    printed, compile_jobs = [], []
    for jid, cls, layer, plist, meta in jobs:
        try:
            job = unverified_job(layer)
        except ArgusError as exc:
            results.append({"id": jid, **meta, "outcome": "compile_error", "detail": f"not printable: {exc}"[:800]})
            continue
        printed.append((jid, cls, layer, plist, meta))
        compile_jobs.append(job)
    arts = compile_many(compile_jobs, args.jobs, return_exceptions=True)
    print(f"built {len(arts)} layers in {time.perf_counter() - t0:.0f} s", flush=True)
    for (jid, cls, layer, plist, meta), art in zip(printed, arts):
        if isinstance(art, CompileError):
            r = {"id": jid, **meta, "outcome": "compile_error", "detail": str(art)[:800]}
        else:
            rows = run_job(str(art.path), layer.kernel_name(), layer, plist, args.timeout)
            outcome = _overall(rows)
            if outcome == "ok" and cls != "baseline":
                outcome = "silent"
            r = {"id": jid, **meta, "outcome": outcome, "problems": rows, "registers": art.registers,
                 "spill_bytes": art.spill_bytes}
        results.append(r)
        print({k: v for k, v in r.items() if k != "story"}, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutants_moe_gpu.json").write_text(json.dumps(results, indent=2, default=str))
    lines = ["| id | class | rule | outcome | problems (outcome, max err) |", "|---|---|---|---|---|"]
    for r in results:
        cells = "; ".join(f"{p['problem']}: {p['outcome']} {p.get('max_err', '')}" for p in r.get("problems", []))
        lines.append(f"| {r['id']} | {r.get('cls', 'baseline')} | {r.get('rule', '')} | {r['outcome']} | {cells} |")
    (out / "mutants_moe_gpu.md").write_text("\n".join(lines) + "\n")
    bad = [r["id"] for r in results if r.get("cls", "baseline") == "baseline" and r["outcome"] != "ok"]
    print(f"{time.perf_counter() - t0:.0f} s; baselines not ok: {bad}" if bad else f"{time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
