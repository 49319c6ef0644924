"""Build every planted mistake of the MoE catalogue WITHOUT the verifier; run it on a Hopper GPU.

    python3 bench/mutants_moe_gpu.py --out OUTDIR [--ids a,b]

For each mutant of ``argus_cutlass/testing/mutants_moe.toml`` (and the unmutated base layer of each
base problem first, which must pass): render the mutated layer (``render_moe``, no verifier), nvcc
it, run it on T = 300 tokens (uniform routing; -1 padding in two slots for the ``invalid_ids``
class) with the output poisoned, compare with the fp32 reference. Outcomes: ``compile_error``,
``launch_error``, ``wrong`` (silicon shows the mistake), ``silent`` (ran correct on this input),
``ok`` (baselines). Writes ``OUTDIR/mutants_moe_gpu.json`` and ``.md``; exit 1 when a baseline fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    import argus_cutlass.templates  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from argus_cutlass.testing.mutants_moe import base_layer, load_moe_catalogue, mutant_layer  # noqa: E402

TOKENS = 300


def _run_layer(layer, name: str, cls: str) -> dict:
    import torch

    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.moe.check import fp32_layer, make_inputs
    from argus_cutlass.kernels.moe.library import MoEKernelLibrary
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.render.moe import render_moe

    try:
        src = render_moe(layer)
        art = compile_cu(src, layer.kernel_name(), "shared", key_parts=(f"program={layer.fingerprint()}",))
    except ArgusError as exc:
        return {"id": name, "outcome": "compile_error", "detail": str(exc)[:500]}
    p = MoEProblem(TOKENS, layer.experts, layer.topk, layer.hidden, layer.ffn, layer.dtype)
    x, ids, w, w13, w2 = make_inputs(p, seed=11)
    if cls == "invalid_ids":
        ids[3, 0] = -1
        ids[7, p.topk - 1] = -1
    try:
        lib = MoEKernelLibrary(art.path, layer.kernel_name(), layer)
        ws = torch.empty(lib.workspace_bytes(TOKENS), dtype=torch.uint8, device="cuda")
        y = torch.full_like(x, float("nan"))
        lib(x, ids.int().contiguous(), w.float().contiguous(), w13, w2, y, ws, TOKENS,
            torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a crash is an outcome
        return {"id": name, "outcome": "launch_error", "detail": f"{type(exc).__name__}: {exc}"[:500]}
    ref = fp32_layer(x, ids, w, w13, w2)
    err = float((y.float() - ref).abs().max())
    ok = err == err and err < 3e-2
    return {"id": name, "outcome": "ok" if ok else "wrong", "max_err": err}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ids", default="")
    args = ap.parse_args(argv)
    cat = load_moe_catalogue()
    ids = [s for s in args.ids.split(",") if s]
    chosen = [m for m in cat.values() if not ids or m.id in ids]
    results, bad_base = [], False
    bases = {}
    for m in chosen:
        key = tuple(sorted(m.base.items()))
        if key not in bases:
            r = _run_layer(base_layer(m, TOKENS), f"base{dict(key)}", "base")
            bases[key] = r
            results.append(r)
            print(r, flush=True)
            bad_base |= r["outcome"] != "ok"
        r = _run_layer(mutant_layer(m), m.id, m.cls)
        r.update(rule=m.rule, cls=m.cls, story=m.story)
        if r["outcome"] == "ok":
            r["outcome"] = "silent"
        results.append(r)
        print(r, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutants_moe_gpu.json").write_text(json.dumps(results, indent=2))
    lines = ["| id | class | rule | outcome | max err |", "|---|---|---|---|---|"]
    lines += [f"| {r['id']} | {r.get('cls', '')} | {r.get('rule', '')} | {r['outcome']} | {r.get('max_err', '')} |"
              for r in results]
    (out / "mutants_moe_gpu.md").write_text("\n".join(lines) + "\n")
    return 1 if bad_base else 0


if __name__ == "__main__":
    raise SystemExit(main())
