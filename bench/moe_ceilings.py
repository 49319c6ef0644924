"""Ceilings of structural levers of the small-T MoE layer, measured on a Hopper GPU by leaving work out.

    python3 bench/moe_ceilings.py --what launches [--cells qwen3-30b-a3b:16,...] [--rounds 10]
    python3 bench/moe_ceilings.py --what padding  [--cells ...] [--rounds 10]

A lever is worth at most what the layer saves when its work is not done at all. Each cell's layer (the
configuration ``generate.configure`` picks: the shipped entry) is printed by the production template, then its
``.cu`` text is patched (a measurement copy: never verified, never shipped, outputs wrong on purpose) with one mode
switch, compiled, and timed in every mode, interleaved: ``--rounds`` rounds of 20-call medians
(``kernels.moe.check.time_fn``: CUDA events, L2 flushed by writing 256 MB before each call).

``--what launches`` (the routing and combine kernels; the layer built with ``handoff``, ``combine_handoff`` and
``dynamic_walk`` off, so a skipped route_scan leaves no stale counter that would let down read h early or hand every
CTA the end ticket): a host flag skips the three routing launches
(route_count, route_scan, route_permute: the workspace keeps the previous full call's routing; its xs holds that
call's out, as out aliases xs, so the output differs -- the bytes moved are the same) and / or the combine launch.
Modes: 0 full, 1 no routing, 2 no combine, 3 neither.

``--what padding`` (the padding rows of the 64-row m-tiles: at small T an m-tile holds a few routed rows; the layer
built with ``row_bounded`` off, the 2-D maps whose boxes cover whole m-tiles, as before session 41): a device
flag points every grouped GEMM's A load at m-tile 0 (xs in gate+up, h in down: L2 hits after the first, so the
padding rows' DRAM reads vanish) and / or every epilogue TMA store at m-tile 0 (h and out writes land on the same
lines, so the padding rows' DRAM writes vanish). Modes: 0 full, 1 loads, 2 stores, 3 both. This also removes the
routed rows' own traffic (a few rows per m-tile), so it bounds what loading and storing only the routed rows saves.

Prints a markdown table; writes nothing else. Needs torch, nvcc and a Hopper GPU (device step ``moe-ceilings``).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

try:
    import argus_cutlass.templates  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: the mode names of each measurement (mode 0: the layer as printed)
MODES = {"launches": ("full", "no routing", "no combine", "neither"),
         "padding": ("full", "A loads from m-tile 0", "stores to m-tile 0", "both")}


def patch_launches(src: str, name: str) -> str:
    """``src`` with a host flag ``g_host_mode`` (bit 0 skips the routing launches, bit 1 the combine launch) and an
    export ``<name>_set_mode(int)``.

    Raises:
        ValueError: the printed launches are not the ones this patch knows (the template changed).
    """
    head = f"namespace {name}_ns {{\n"
    if src.count(head) != 1:
        raise ValueError(f"{name}: the layer namespace is not printed once")
    src = src.replace(head, head + "static int g_host_mode = 0;\n", 1)
    n = 0
    for stmt, bit in (("route_count<<<", 1), ("err = launch_programmatic(route_scan", 1),
                      ("err = launch_programmatic(route_permute", 1), ("route_scan<<<", 1), ("route_permute<<<", 1),
                      ("err = launch_programmatic(combine", 2), ("combine<<<", 2)):
        if "  " + stmt in src:
            src = src.replace("  " + stmt, f"  if (!(g_host_mode & {bit})) " + stmt, 1)
            n += 1
    if n != 4:
        raise ValueError(f"{name}: found {n} of the 4 launches (route_count, route_scan, route_permute, combine)")
    return src + f'\nextern "C" void {name}_set_mode(int m) {{ {name}_ns::g_host_mode = m; }}\n'


def patch_padding(src: str, name: str) -> str:
    """``src`` with a device flag ``g_pad_mode`` (bit 0: every grouped A load reads m-tile 0; bit 1: every epilogue
    TMA store writes m-tile 0) and an export ``<name>_set_mode(int)``.

    Raises:
        ValueError: the printed A-load origin or store coordinate is not the one this patch knows.
    """
    head = f"namespace {name}_gu {{\n"
    load = "    int const a_mn0 = w.tm * kTileAMn;"
    store = "          int const c_outer = m_base + em * kEpiM;"
    if src.count(head) != 1 or src.count(load) != 2 or src.count(store) != 2:
        raise ValueError(f"{name}: expected one gate+up namespace and two grouped A-load origins / store coordinates, "
                         f"found {src.count(head)} / {src.count(load)} / {src.count(store)}")
    src = src.replace(head, "__device__ int g_pad_mode = 0;\n" + head, 1)
    src = src.replace(load, "    int const a_mn0 = (g_pad_mode & 1) ? 0 : w.tm * kTileAMn;")
    src = src.replace(store, "          int const c_outer = ((g_pad_mode & 2) ? 0 : m_base) + em * kEpiM;")
    return src + (f'\nextern "C" void {name}_set_mode(int m) {{ cudaMemcpyToSymbol(g_pad_mode, &m, sizeof(int)); '
                  'cudaDeviceSynchronize(); }\n')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", required=True, choices=sorted(MODES))
    ap.add_argument("--cells", default="qwen3-30b-a3b:16,deepseek-v2-lite:16,mixtral:16,qwen3-30b-a3b:256,"
                                       "deepseek-v2-lite:256", help="comma-separated model:T (MoEProblem.for_model)")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args(argv)

    import dataclasses

    from argus_cutlass.build.nvcc import compile_many
    from argus_cutlass.generate import configure
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.program import build_layer
    from argus_cutlass.testing.mutants_moe import unverified_job

    try:
        cells = [(m, int(t)) for m, t in (c.split(":") for c in args.cells.split(",") if c)]
        problems = [MoEProblem.for_model(m, t) for m, t in cells]
    except (ValueError, KeyError) as exc:
        ap.error(f"--cells {args.cells!r}: expected model:T, comma-separated ({exc})")
    patch = patch_launches if args.what == "launches" else patch_padding
    jobs = []
    for p in problems:
        cfg = configure(p)[0]
        if args.what == "launches":   # no counter route_scan zeroes: the handoffs' and the dynamic walk's tickets
            cfg = cfg.replace(handoff=False, combine_handoff=False, dynamic_walk=False)
        else:   # the padding rows' traffic exists only on the 2-D maps (row-bounded tiles do not read or write it)
            cfg = cfg.replace(row_bounded=False)
        layer = build_layer(cfg, p)
        name = layer.kernel_name()
        job = unverified_job(layer)   # the production template's text, never verified: patched below
        jobs.append((p, layer, name, dataclasses.replace(job, source=patch(job.source, name),
                                                         name=f"{name}_{args.what}")))
    t0 = time.time()
    arts = compile_many([j[3] for j in jobs])   # one parallel nvcc batch through the kernel cache
    print(f"compiled {len(jobs)} measurement copies in {time.time() - t0:.0f} s", flush=True)

    import torch

    from argus_cutlass.kernels.moe.check import time_fn, timed_inputs
    from argus_cutlass.kernels.moe.library import MoEKernelLibrary

    runs = []
    for (p, layer, name, _), art in zip(jobs, arts):
        lib = MoEKernelLibrary(art.path, name, layer)
        set_mode = getattr(lib._dll, f"{name}_set_mode")
        set_mode.argtypes = [ctypes.c_int]
        inputs = timed_inputs(p)
        ws = torch.empty(lib.workspace_bytes(p.tokens), dtype=torch.uint8, device="cuda")
        set_mode(0)
        lib.forward(*inputs, workspace=ws, padding="unchecked")   # mode 0 first: the routing the others reuse
        runs.append((p, lib, set_mode, inputs, ws, [[] for _ in MODES[args.what]]))
    torch.cuda.synchronize()
    for _ in range(args.rounds):
        for p, lib, set_mode, inputs, ws, times in runs:
            for mode in range(len(times)):
                set_mode(mode)
                times[mode].append(time_fn(lambda: lib.forward(*inputs, workspace=ws, padding="unchecked"),
                                           warmup=3, iters=20) * 1e3)
            set_mode(0)
    names = MODES[args.what]
    print(f"\n| model | T | {' us | '.join(names)} us | saved by '{names[-1]}' |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for (m, t), (p, lib, set_mode, inputs, ws, times) in zip(cells, runs):
        md = [statistics.median(v) for v in times]
        print(f"| {m} | {t} | " + " | ".join(f"{v:.1f}" for v in md) +
              f" | {md[0] - md[-1]:.1f} us ({(md[0] - md[-1]) / md[0] * 100:.1f} %) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
