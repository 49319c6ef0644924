"""False-alarm sweep of the GEMM verifier: random configurations across the whole space, every
rejection tied to a named hardware / CUTLASS / static_assert rule, or run on the H200.

    python bench/false_alarms.py --out bench/data [--n 300] [--seed 9] [--no-smt]
                                 [--max-compiles 10] [--no-compile] [--jobs 2]
    python bench/false_alarms.py --out OUTDIR --gpu [--plan bench/data/false_alarms.json] [--timeout 10]

The CPU run writes ``OUT/false_alarms.json`` (every configuration: fields, outcome, rules,
classification, the printed kernel's facts; the sources table; the compiled representatives) and
``OUT/false_alarms.md`` (counts by outcome and by rule, the sources table, the list for the GPU),
with the exact command at the top. ``--gpu`` reads the plan (the CPU run's JSON: ``--plan``, else
``OUT/false_alarms.json``, else ``bench/data/false_alarms.json``; computed afresh without compiles
when none exists), builds the listed kernels WITHOUT the verifier, runs each in a
child process with a timeout and writes ``OUT/false_alarms_gpu.json`` / ``.md``; the exit status is
1 when a baseline is not correct or a rejected configuration runs correctly (a false alarm).
Library: :mod:`argus_cutlass.testing.sweep`.

On the lent H200 (no package index), install the carried wheels first, e.g.::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:. python3 bench/false_alarms.py --out $OUT --gpu
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, when not installed

from argus_cutlass.testing import sweep  # noqa: E402


def _command(argv: list[str] | None) -> str:
    args = sys.argv[1:] if argv is None else argv
    return shlex.join([Path(sys.executable).as_posix(), "bench/false_alarms.py", *args])


def _cpu(args: argparse.Namespace, command: str) -> int:
    t0 = time.perf_counter()
    configs = sweep.sample_configs(args.n, args.seed)
    print(f"sweep: {len(configs)} configs (seed {args.seed}), smt={not args.no_smt}", flush=True)
    records = sweep.run_sweep(configs, smt=not args.no_smt, log=lambda s: print(s, flush=True))
    compiles = []
    if not args.no_compile:
        compiles = sweep.compile_representatives(records, args.work, max_compiles=args.max_compiles,
                                                 workers=args.jobs, log=lambda s: print(s, flush=True))
        sweep.assign_gpu_roles(records)
    meta = {"n": args.n, "seed": args.seed, "smt": not args.no_smt, "seconds": time.perf_counter() - t0}
    j, md = sweep.write_outputs(records, compiles, args.out, command, meta)
    s = sweep.summary(records)
    print(f"outcomes {s['outcome']}; verdicts {s['verdict']}; gpu {s['gpu']}; "
          f"unclassified violations {len(s['unclassified'])}; {meta['seconds']:.0f} s; {j}, {md}")
    return 0


def _gpu(args: argparse.Namespace, command: str) -> int:
    candidates = [Path(args.plan)] if args.plan else [Path(args.out) / "false_alarms.json",
                                                      Path(__file__).resolve().parent / "data" / "false_alarms.json"]
    plan_path = next((c for c in candidates if c.is_file()), candidates[0])
    if plan_path.is_file():
        records, _ = sweep.load_records(plan_path)
        print(f"plan: {plan_path} ({len(records)} configs)", flush=True)
    else:
        print(f"no plan at {plan_path}: running the CPU sweep first (no compiles)", flush=True)
        records = sweep.run_sweep(sweep.sample_configs(args.n, args.seed), smt=not args.no_smt)
    plan = sweep.gpu_plan(records)
    expected = {r.id: r.printed["sha256"] for r in records if r.printed.get("sha256")}
    rows = sweep.run_gpu(plan, args.work, expected_sha=expected, kernel_timeout_s=args.timeout,
                         workers=args.jobs, log=lambda s: print(s, flush=True))
    sweep.apply_documented(rows, records)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "false_alarms_gpu.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1, default=str))
    (out / "false_alarms_gpu.md").write_text(sweep.gpu_markdown(rows, command))
    bad = [r["id"] for r in rows if r["verdict"] in ("HARNESS", "FALSE ALARM")]
    not_shown = [r["id"] for r in rows if r["verdict"] == "NOT SHOWN"]
    print(f"{len(rows)} kernels; false alarms / harness failures: {bad or 'none'}; hardware confirms / probes "
          f"that ran correctly: {not_shown or 'none'}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for false_alarms*.json / .md")
    ap.add_argument("--n", type=int, default=sweep.N_SWEEP, help="configurations to sample")
    ap.add_argument("--seed", type=int, default=sweep.SEED)
    ap.add_argument("--no-smt", action="store_true", help="verify without the z3 tier")
    ap.add_argument("--max-compiles", type=int, default=10, help="nvcc runs for the representatives")
    ap.add_argument("--no-compile", action="store_true", help="skip the representatives' nvcc runs")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (CPU run: 2)")
    ap.add_argument("--work", default="/tmp/argus_false_alarms", help="directory for .cu / .so / nvcc logs")
    ap.add_argument("--gpu", action="store_true", help="build and run the plan's kernels on the GPU")
    ap.add_argument("--plan", default="", help="the CPU run's false_alarms.json (default: OUT/false_alarms.json, "
                    "else bench/data/false_alarms.json)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a kernel may run before it is hung")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be >= 1, got {args.n}")
    command = _command(argv)
    if args.gpu:
        return _gpu(args, command)
    args.jobs = args.jobs or 2
    return _cpu(args, command)


if __name__ == "__main__":
    raise SystemExit(main())
