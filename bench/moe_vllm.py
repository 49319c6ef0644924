"""Our MoE layer beside vLLM's Triton fused MoE and the torch ``_grouped_mm`` layer, interleaved in one process.

    python3 bench/moe_vllm.py [--cells mixtral:16,qwen3-30b-a3b:256,e8k2h1024i512:256] [--rounds 5] [--iters 20]
                              [--out FILE.md] [--vllm-dir DIR] [--graph CALLS] [--heuristic]

vLLM is not a dependency: its fused MoE (the Triton ``fused_moe_kernel``, its configuration files and selection,
the call sequence of ``fused_experts_impl``) is a baseline kept outside the project's tracked files, in a
git-ignored folder (``--vllm-dir``, else ``$ARGUS_VLLM_MOE_DIR``, else ``.baselines/vllm_moe`` of this
checkout; its README says what is vLLM's code, from which commit, and what is re-implemented;
``bench/VLLM_BASELINE.md`` is the recipe for rebuilding it on a fresh machine). Without it the command stops and says so. On a lent device the folder travels only when the run tool's ``carry`` names it.

Each cell (``model:T`` of ``MoEProblem.for_model`` or ``e<E>k<k>h<H>i<I>:T``; default the 12 bench cells: the
three ANCHORS models x T in 16, 256, 2048, 8192): our layer as ``generate.configure`` picks it (the shipped entry
or the heuristic), generated, verified and compiled with the other cells' in one parallel nvcc batch
(``moe_ab.build_layers``). Both layers are first checked against the fp32 reference on the same inputs
(``check.check_layers``: uniform routing, outputs poisoned with NaN; ours through ``check.run_poisoned``,
workspace poisoned too) with the layer's bound; a vLLM output past it means the baseline is wrong: the cell says
so and times ours and ``_grouped_mm`` only. The baseline's align step (a re-implementation: vLLM's is a CUDA op)
is compared with vLLM's own Triton align on the timed routing (same padded total, expert per block and ids per
block). Then ours, vLLM's and the ``_grouped_mm`` layer (and vLLM's align alone, column ``align ms``) are timed
``--rounds`` times, interleaved, the order reversed every other round, on ``check.timed_inputs`` (uniform routing,
the timing seed): each time the median of ``--iters`` CUDA-event timings with L2 flushed before each call
(``check.time_fn``), the cell's time the median of its rounds. vLLM gets the routing as its router gives it
(int32 ids, fp32 weights, converted once outside the timing). Prints a markdown table (also to ``--out``): the
three times, vLLM / ours, ``_grouped_mm`` / ours and ``_grouped_mm`` / vLLM (the ratio ANCHORS.md states,
beside ANCHORS' vLLM ms and ratio measured in another run), the activated-weight floor of the timed routing
(``check.timed_floor_ms``, at the issue's 4.3 TB/s) and each layer over it, the same floor at this GPU's own
device-to-device copy bandwidth measured first in the process (``check.copy_bytes_per_s``: the method that gave
4.3 TB/s on the H200, so on another GPU -- an H100 copies ~3.0 TB/s -- the "copy floor" columns are the issue's
floor translated to it) and each layer over that, and the configurations. Needs torch, triton, nvcc and a
Hopper GPU.

``--heuristic``: our layer as the heuristic picks it (``configure(..., heuristic=True)``), not the tuned table's entry
(the shipped entries are H200 measurements; on another GPU the heuristic is what an untuned shape gets).

``--graph CALLS``: ours, vLLM's layer and its align are timed instead from ``torch.cuda.CUDAGraph`` replays of
CALLS back-to-back calls (``kernels.gemm.baseline.torch_graph_ms``; no L2 flush between the calls of a replay),
as a serving engine replays a decode step; ``_grouped_mm`` (it reads its group sizes on the host: not
capturable) stays timed per call, so the bridge columns mix the two methods (the table's first line says so).
Why: per call, vLLM's host path (Python config selection, allocations, six Triton launches) can outlast the
device's work at small T, and then the host is timed -- in session 46 vLLM's Qwen3 T = 16 layer read 0.308 / 0.309 ms
per call on two H100 machines and 0.470 ms on a third (its align alone 0.02 vs 0.10 ms) while ours read 0.300-0.301.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from pathlib import Path

try:
    import argus_cutlass.templates  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: the environment variable naming the baseline folder when --vllm-dir is not given
ENV_DIR = "ARGUS_VLLM_MOE_DIR"
#: the baseline folder when neither is given (git-ignored: /.baselines/ in .gitignore)
DEFAULT_DIR = Path(__file__).resolve().parents[1] / ".baselines" / "vllm_moe"
#: the files the baseline folder must hold (a package: __init__.py exports fused_experts and the rest)
BASELINE_FILES = ("__init__.py", "fused_moe.py", "moe_align_block_size.py")
#: the 12 bench cells of bench/test_moe_bench.py
DEFAULT_CELLS = ",".join(f"{m}:{t}" for m in ("mixtral", "qwen3-30b-a3b", "deepseek-v2-lite")
                         for t in (16, 256, 2048, 8192))

HEAD = ("| model | T | ours ms | vLLM ms | _grouped_mm ms | vLLM / ours | _grouped_mm / ours | _grouped_mm / vLLM | "
        "ANCHORS vLLM ms | ANCHORS _grouped_mm / vLLM | floor ms | ours / floor | vLLM / floor | copy floor ms | "
        "ours / copy floor | vLLM / copy floor | vLLM align ms | ours config | vLLM config |\n" + "|---" * 19 + "|")


class BaselineMissing(Exception):
    """The vLLM baseline folder is absent or incomplete (the message says where it was looked for and why)."""


def baseline_dir(arg: str | None, environ: dict | None = None) -> Path:
    """The folder of vLLM's fused MoE: ``arg`` (--vllm-dir), else ``$ARGUS_VLLM_MOE_DIR``, else
    :data:`DEFAULT_DIR`; checked to hold :data:`BASELINE_FILES`.

    Raises:
        BaselineMissing: the folder or one of its files is absent (the message names the folder, how it was
            chosen, and how to provide it).
    """
    environ = os.environ if environ is None else environ
    if arg:
        path, how = Path(arg), "--vllm-dir"
    elif environ.get(ENV_DIR):
        path, how = Path(environ[ENV_DIR]), f"${ENV_DIR}"
    else:
        path, how = DEFAULT_DIR, "the default"
    missing = [f for f in BASELINE_FILES if not (path / f).is_file()]
    if missing:
        what = "does not exist" if not path.is_dir() else f"lacks {', '.join(missing)}"
        raise BaselineMissing(
            f"vLLM baseline folder {path} ({how}) {what}: vLLM's fused MoE is a git-ignored baseline, never "
            f"committed; put its extraction there (a package: {', '.join(BASELINE_FILES)}, configs/) or name it "
            f"with --vllm-dir DIR or {ENV_DIR}=DIR; on a lent device, pass .baselines/vllm_moe in the run tool's "
            f"carry list; bench/VLLM_BASELINE.md says how to rebuild it")
    return path.resolve()


def load_baseline(path: Path):
    """Import the baseline folder as the package ``argus_vllm_moe_baseline`` (its relative imports resolve inside)."""
    name = "argus_vllm_moe_baseline"
    spec = importlib.util.spec_from_file_location(name, path / "__init__.py", submodule_search_locations=[str(path)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list]:
    """(options, [(cell, MoEProblem)]); a bad cell or count is an argparse error naming it."""
    from moe_ab import parse_cell

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=DEFAULT_CELLS, help="comma-separated model:T or eEkKhHiI:T")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (the cell's time: their median)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per round (the round's time: their median)")
    ap.add_argument("--out", help="write the markdown table to this file too")
    ap.add_argument("--vllm-dir", help=f"the baseline folder (default ${ENV_DIR}, else .baselines/vllm_moe)")
    ap.add_argument("--graph", type=int, default=0, metavar="CALLS",
                    help="time ours, vLLM and its align from CUDA graphs of CALLS back-to-back calls (0: per call)")
    ap.add_argument("--heuristic", action="store_true",
                    help="our layer as the heuristic picks it, not the tuned table's entry")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.iters < 1:
        ap.error("--rounds and --iters must be at least 1")
    if args.graph < 0:
        ap.error(f"--graph {args.graph}: the calls per graph must be at least 1 (0: time per call)")
    try:
        cells = [(c, parse_cell(c)) for c in args.cells.split(",") if c]
    except ValueError as exc:
        ap.error(str(exc))
    if not cells:
        ap.error("--cells: no cell given")
    return args, cells


def same_alignment(a: tuple, b: tuple, block: int) -> bool:
    """Two moe_align_block_size outputs (sorted ids, expert ids, padded total) agree: the same total, the same
    expert per block and, per expert, the same ids over its blocks (sentinels included), in any order: the
    re-implemented align ranks an expert's ids by atomics, vLLM's Triton stages serially, so an expert with
    more ids than one block holds splits them over its blocks differently (session 46, H100: Mixtral T = 256,
    ~64 ids an expert at BLOCK_SIZE_M 64, was flagged by a per-block comparison). Works on torch or numpy."""
    total = int(a[2].reshape(-1)[0])
    if total != int(b[2].reshape(-1)[0]):
        return False
    nb = total // block
    if not bool((a[1][:nb] == b[1][:nb]).all()):
        return False
    # blocks come in expert order and their experts agree: sorting (expert, id) keys over the padded total
    # compares each expert's multiset of ids
    slot_expert = [e for e in a[1][:nb].tolist() for _ in range(block)]
    keys = [sorted(e * (1 << 32) + int(v) for e, v in zip(slot_expert, x[0][:total].tolist())) for x in (a, b)]
    return keys[0] == keys[1]


def main(argv: list[str] | None = None) -> int:
    args, cells = parse_args(argv)
    try:
        vdir = baseline_dir(args.vllm_dir)
    except BaselineMissing as exc:
        print(f"moe_vllm: {exc}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("moe_vllm: needs torch (a CUDA build), triton and a Hopper GPU: it times layers", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("moe_vllm: needs a Hopper GPU: torch sees no CUDA device", file=sys.stderr)
        return 2
    vm = load_baseline(vdir)
    print(f"vLLM baseline {vdir} (vLLM {getattr(vm, 'VLLM_COMMIT', '?')[:12]}), {torch.cuda.get_device_name()}",
          flush=True)

    from moe_ab import build_layers
    from moe_anchors import VLLM_MS, VLLM_RATIO

    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.moe.baseline import grouped_mm_layer
    from argus_cutlass.kernels.gemm.baseline import torch_graph_ms
    from argus_cutlass.kernels.moe.check import (check_layers, copy_bytes_per_s, run_poisoned, time_fn, timed_floor_ms,
                                                  timed_inputs)

    copy_bw = copy_bytes_per_s()
    print(f"device-to-device copy: {copy_bw / 1e12:.2f} TB/s (read + written; the copy floor's rate)", flush=True)
    labels = [c for c, _ in cells]
    problems = [p for _, p in cells]
    libs, picks = build_layers(problems, [("-", {})], labels, heuristic=args.heuristic)
    rows = []
    fell_back: list[str] = []   # --graph: "cell layer" timed per call after its capture failed
    for ci, (cell, p) in enumerate(cells):
        if (ci, "-") not in libs:
            continue
        lib = libs[(ci, "-")]
        cfg, source = picks[ci].config, picks[ci].source
        model = cell.partition(":")[0]

        def vllm_layer(x, ids, w, w13, w2, cell=cell):
            out = torch.full_like(x, float("nan"))
            try:
                return vm.fused_experts(x, w13, w2, w.float(), ids.int(), out=out)
            except Exception as exc:  # noqa: BLE001 - a baseline that fails to run is reported, not fatal
                print(f"{cell} vllm: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
                return out

        def ours_layer(x, ids, w, w13, w2, lib=lib, tokens=p.tokens):
            return run_poisoned(lib, tokens, x, ids, w, w13, w2)

        chk = check_layers(p, {"ours": ours_layer, "vllm": vllm_layer})
        for name, c in chk.items():
            print(f"{cell} {name}: err {c.err:.3g} (bound {c.bound:.3g}) {'ok' if c.ok else 'WRONG'}", flush=True)
        if not chk["ours"].ok:
            print(f"{cell}: our layer is WRONG: not timed", flush=True)
            continue
        x, ids, w, w13, w2 = timed_inputs(p)
        ids32, w32 = ids.int().contiguous(), w.float().contiguous()
        vcfg, vsource = vm.layer_config(w13, w2, p.topk, p.tokens, x.dtype)
        vllm_ok = chk["vllm"].ok
        if not vllm_ok:
            print(f"{cell}: vLLM's output is past the bound: the baseline is wrong, its timing is skipped", flush=True)
        else:
            block = vcfg["BLOCK_SIZE_M"]
            mine = vm.moe_align_block_size(ids32, block, p.experts, None, ignore_invalid_experts=True)
            theirs = vm.moe_align_block_size_vllm_triton(ids32, block, p.experts)
            if not same_alignment(mine, theirs, block):   # the verbatim Triton align: slow, compared once
                print(f"{cell}: the baseline's align differs from vLLM's Triton align: its timing is skipped",
                      flush=True)
                vllm_ok = False
        ws = torch.empty(lib.workspace_bytes(p.tokens), dtype=torch.uint8, device="cuda")
        timed = {"ours": lambda: lib.forward(x, ids, w, w13, w2, workspace=ws, padding="unchecked"),
                 "grouped": lambda: grouped_mm_layer(x, ids, w, w13, w2)}
        if vllm_ok:
            timed["vllm"] = lambda: vm.fused_experts(x, w13, w2, w32, ids32)
            timed["align"] = lambda: vm.moe_align_block_size(ids32, vcfg["BLOCK_SIZE_M"], p.experts, None,
                                                             ignore_invalid_experts=True)
        times: dict[str, list[float]] = {k: [] for k in timed}
        uncapturable: set[str] = set()
        order = list(timed)
        for r in range(args.rounds):   # ABBA: drift within a round hits every layer alike
            for k in order[:: 1 if r % 2 == 0 else -1]:
                if args.graph and k != "grouped" and k not in uncapturable:   # _grouped_mm syncs: never captured
                    try:
                        times[k].append(torch_graph_ms(timed[k], args.graph, 2, args.iters))
                        continue
                    except (RuntimeError, ArgusError) as exc:   # a capture this layer breaks: said, then timed per call
                        uncapturable.add(k)
                        fell_back.append(f"{cell} {k}")
                        torch.cuda.synchronize()
                        print(f"{cell} {k}: not capturable ({str(exc).splitlines()[0] if str(exc) else exc!r}): "
                              "timed per call", flush=True)
                times[k].append(time_fn(timed[k], warmup=5, iters=args.iters))
        med = {k: statistics.median(v) for k, v in times.items()}
        floor = timed_floor_ms(p)
        cfloor = timed_floor_ms(p, copy_bw)
        o, g, v = med["ours"], med["grouped"], med.get("vllm")
        anchor_ms, anchor_ratio = VLLM_MS.get((model, p.tokens)), VLLM_RATIO.get((model, p.tokens))

        def f(val, fmt=".3f"):
            return "-" if val is None else format(val, fmt)

        ours_cfg = (f"m{cfg.tile_m} gu{cfg.gu_tile_n}x{cfg.gu_stages} dn{cfg.dn_tile_n}x{cfg.dn_stages} "
                    f"k{cfg.tile_k} ({source})")
        vllm_cfg = ("M{BLOCK_SIZE_M} N{BLOCK_SIZE_N} K{BLOCK_SIZE_K} G{GROUP_SIZE_M} w{w} s{s}".format(
            w=vcfg.get("num_warps", "-"), s=vcfg.get("num_stages", "-"), **vcfg) + f" ({vsource})") if vllm_ok else "-"
        rows.append(f"| {model} | {p.tokens} | {o:.3f} | {f(v)} | {g:.3f} | {f(v and v / o, '.2f')} | {g / o:.2f} | "
                    f"{f(v and g / v, '.2f')} | {f(anchor_ms)} | {f(anchor_ratio, '.2f')} | {floor:.3f} | "
                    f"{o / floor:.2f} | {f(v and v / floor, '.2f')} | {cfloor:.3f} | {o / cfloor:.2f} | "
                    f"{f(v and v / cfloor, '.2f')} | {f(med.get('align'))} | {ours_cfg} | "
                    f"{vllm_cfg} |")
        print(rows[-1], flush=True)
        print(f"{cell} rounds (ms): " + "; ".join(f"{k} {[round(t, 4) for t in times[k]]}" for k in order),
              flush=True)
        del x, ids, w, w13, w2, ws, ids32, w32
        torch.cuda.empty_cache()
        if args.out:   # the table so far: a run cut short by its time limit keeps the cells it finished
            Path(args.out).write_text(_table(args, copy_bw, fell_back, rows, partial=True))
    table = _table(args, copy_bw, fell_back, rows)
    print("\n" + table)
    if args.out:
        Path(args.out).write_text(table)
    return 0


def _table(args: argparse.Namespace, copy_bw: float, fell_back: list[str], rows: list[str],
           partial: bool = False) -> str:
    """The markdown table: how it was timed, the header, the rows (``partial``: a line saying cells may follow)."""
    how = (f"timing: ours, vLLM and its align from CUDA graphs of {args.graph} back-to-back calls (no L2 flush "
           "between them); _grouped_mm per call, L2 flushed (the bridge columns mix the two)"
           + (f"; not capturable, timed per call: {', '.join(fell_back)}" if fell_back else "") + "\n\n" if args.graph else
           "timing: per call, L2 flushed before each\n\n")
    how = f"device-to-device copy {copy_bw / 1e12:.2f} TB/s (the copy floor's rate); " + how
    return (("(partial: the run had not finished its cells when this was written)\n" if partial else "")
            + how + HEAD + "\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())
