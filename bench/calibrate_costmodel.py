"""Calibrate the GEMM cost model's constants from measured tables and write them as data.

    python3 bench/calibrate_costmodel.py [--table bench/data/agent_eval_table.json ...] [--out agent/costmodel_h200.json]
                                         [--holdout] [--maxiter 600]

A table is the format of ``bench/agent_eval.py``'s ``agent_eval_table.json``: ``candidates`` (a list of
:class:`~argus_cutlass.kernels.gemm.config.GemmConfig` dicts) and ``shapes`` (``"MxNxK"`` ->
``{"kernels": {kernel label: measured ms}}``, labels of :func:`argus_cutlass.generate.kernel_label`).

The fit: the parameters of :class:`argus_cutlass.agent.costmodel.CostParams` except the HBM bandwidth
(a datasheet number), in log space, by Nelder-Mead (scipy) on a loss that rewards what the planner
needs -- the right order of the candidates of each shape -- plus a little absolute accuracy:

* per shape, the regret of the model's pick, smoothed: the candidates weighted by a softmin of their
  predicted times (temperature 0.02 in log time), times their measured time over the shape's best,
  minus 1 (the argmin's regret as the temperature goes to 0);
* 0.05 x the mean squared log error of the predicted time (keeps the scale physical).

It reports, per shape, the regret of the model's first choice (its measured time over the best
measured time of the shape, minus 1) with the hand-set defaults and with the fit; ``--holdout`` also
refits leaving each shape out and scores the shape it did not see (the honest number).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

#: CostParams fields the fit moves (the HBM bandwidth stays the datasheet's)
FREE = ("peak_flops", "l2_bytes_per_s_per_sm", "mem_latency_s", "launch_s", "epilogue_bytes_per_s_per_sm",
        "gmma_wg64", "gmma_wg128", "gmma_smem", "sm_bytes_per_s", "pingpong_big_tile", "stage_penalty", "swizzle_bonus", "reduce_fixed_s")
#: lower / upper bounds of each free parameter (physical sanity)
BOUNDS = {"peak_flops": (5e14, 9.9e14), "l2_bytes_per_s_per_sm": (3e10, 3e11), "mem_latency_s": (3e-7, 3e-6),
          "launch_s": (1e-6, 1.5e-5), "epilogue_bytes_per_s_per_sm": (2e10, 1e12), "gmma_wg64": (0.4, 1.0),
          "gmma_wg128": (0.5, 1.0), "gmma_smem": (1e-3, 1.0), "sm_bytes_per_s": (1e10, 1e12), "pingpong_big_tile": (0.6, 1.1), "stage_penalty": (0.0, 0.6),
          "swizzle_bonus": (0.9, 1.05), "reduce_fixed_s": (0.0, 1e-5)}
#: a pick within this of the best measured time counts as right (issue 13's 3%)
TIE = 0.03
#: temperature of the smoothed pick (log-time units): the loss is the regret of a softmin pick
SOFTMIN = 0.02


def load_tables(paths: list[str]) -> list[tuple[tuple[int, int, int], list, np.ndarray]]:
    """``[((m, n, k), [KernelShape per measured candidate], measured ms array)]``.

    Raises:
        SystemExit: a table is missing or not in the expected format (the message names it).
    """
    from argus_cutlass.agent.costmodel import shape_of_config
    from argus_cutlass.generate import kernel_label
    from argus_cutlass.kernels.gemm.config import GemmConfig

    out = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
            label = {kernel_label(GemmConfig(**c)): GemmConfig(**c) for c in data["candidates"]}
            shapes = data["shapes"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{path}: not a measured table ({type(exc).__name__}: {exc})") from None
        for key, row in shapes.items():
            m, n, k = (int(x) for x in key.split("x"))
            meas = [(label[name], t) for name, t in row.get("kernels", {}).items() if name in label and t]
            if len(meas) < 2:
                continue
            out.append(((m, n, k), [shape_of_config(c) for c, _ in meas], np.array([t for _, t in meas])))
    return out


def predictions(data: list, params) -> list[np.ndarray]:  # noqa: ANN001
    from argus_cutlass.agent.costmodel import predict_ms

    return [np.array([predict_ms(s, m, n, k, params) for s in shapes]) for (m, n, k), shapes, _ in data]


def loss(data: list, preds: list[np.ndarray]) -> float:
    total = 0.0
    for (_, _, meas), p in zip(data, preds):
        z = -(np.log(p) - np.log(p).min()) / SOFTMIN
        w = np.exp(z) / np.exp(z).sum()             # the model's pick, smoothed
        total += float(np.sum(w * (meas / meas.min() - 1.0)))
    pick = total / len(data)
    err = float(np.mean(np.concatenate([(np.log(p) - np.log(meas)) ** 2 for (_, _, meas), p in zip(data, preds)])))
    return pick + 0.05 * err


def regrets(data: list, preds: list[np.ndarray]) -> list[float]:
    """Per shape: measured time of the model's first choice / best measured - 1."""
    return [float(meas[int(np.argmin(p))] / meas.min() - 1.0) for (_, _, meas), p in zip(data, preds)]


def fit(data: list, start, maxiter: int):  # noqa: ANN001
    from scipy.optimize import minimize

    from argus_cutlass.agent.costmodel import CostParams

    lo = np.array([math.log(BOUNDS[f][0] if BOUNDS[f][0] > 0 else 1e-9) for f in FREE])
    hi = np.array([math.log(BOUNDS[f][1]) for f in FREE])
    x0 = np.clip(np.array([math.log(max(getattr(start, f), 1e-9)) for f in FREE]), lo, hi)

    def params(x: np.ndarray):  # noqa: ANN202
        x = np.clip(x, lo, hi)
        return CostParams(**{**{f: getattr(start, f) for f in CostParams.fields()},
                             **{f: float(math.exp(v)) for f, v in zip(FREE, x)}})

    def f(x: np.ndarray) -> float:
        return loss(data, predictions(data, params(x)))

    best = x0
    for _ in range(3):  # restarts: Nelder-Mead's simplex collapses on a piecewise-flat loss
        res = minimize(f, best, method="Nelder-Mead", options={"maxiter": maxiter, "xatol": 1e-3, "fatol": 1e-6})
        if res.fun < f(best):
            best = res.x
    return params(best)


def main(argv: list[str] | None = None) -> int:
    from argus_cutlass.agent.costmodel import CostParams

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", action="append", default=None,
                    help="measured table (repeatable; default bench/data/agent_eval_table.json)")
    ap.add_argument("--out", default="", help="write the fitted parameters here (e.g. agent/costmodel_h200.json)")
    ap.add_argument("--holdout", action="store_true", help="also score each shape with a fit that did not see it")
    ap.add_argument("--maxiter", type=int, default=600)
    args = ap.parse_args(argv)
    tables = args.table or [str(Path(__file__).resolve().parent / "data" / "agent_eval_table.json")]
    data = load_tables(tables)
    if not data:
        raise SystemExit(f"no shape with two or more measured candidates in {tables}")
    t0 = time.perf_counter()
    base = CostParams()
    base_reg = regrets(data, predictions(data, base))
    fitted = fit(data, base, args.maxiter)
    fit_reg = regrets(data, predictions(data, fitted))
    lines = ["| shape | candidates | regret, defaults | regret, fitted (all shapes) | regret, held out |",
             "|---|---|---|---|---|"]
    held = [float("nan")] * len(data)
    if args.holdout:
        for i in range(len(data)):
            rest = data[:i] + data[i + 1:]
            p_i = fit(rest, base, args.maxiter)
            held[i] = regrets([data[i]], predictions([data[i]], p_i))[0]
    for (mnk, shapes, _), a, b, h in zip(data, base_reg, fit_reg, held):
        lines.append(f"| {'x'.join(map(str, mnk))} | {len(shapes)} | {100 * a:.1f}% | {100 * b:.1f}% | "
                     f"{'' if math.isnan(h) else f'{100 * h:.1f}%'} |")

    def within(r: list[float]) -> str:
        ok = [x for x in r if not math.isnan(x)]
        return f"{sum(x <= TIE for x in ok)}/{len(ok)} within 3%, geomean regret {100 * (math.exp(np.mean(np.log1p(ok))) - 1):.1f}%"

    lines.append("")
    lines.append(f"defaults: {within(base_reg)}; fitted: {within(fit_reg)}"
                 + (f"; held out: {within(held)}" if args.holdout else ""))
    print("\n".join(lines))
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.out:
        note = (f"fitted by bench/calibrate_costmodel.py on {', '.join(Path(t).name for t in tables)} "
                f"({len(data)} shapes, {sum(len(s) for _, s, _ in data)} measured kernels) on "
                f"{time.strftime('%Y-%m-%d')}; {within(fit_reg)} on the fitted shapes"
                + (f", {within(held)} held out" if args.holdout else ""))
        Path(args.out).write_text(json.dumps({"gpu": "NVIDIA H200", "note": note,
                                              "params": {f: getattr(fitted, f) for f in CostParams.fields()}},
                                             indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
