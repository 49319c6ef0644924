"""Calibrate the GEMM cost model's constants from measured tables and write them as data.

    python3 bench/calibrate_costmodel.py [--table bench/data/agent_eval_table.json ...] [--out agent/costmodel_h200.json]
                                         [--holdout] [--maxiter 600] [--residuals SWEEP_TABLE]
    python3 bench/calibrate_costmodel.py --keep-params --residuals SWEEP_TABLE [--residuals GRAPH_TABLE] --out agent/costmodel_h200.json
    python3 bench/calibrate_costmodel.py --cv SWEEP_TABLE [--cv-residuals TABLE ...]   # the held-out score of the untuned choice

The shipped residuals (session 28): ``--residuals bench/data/gemm_sweep_bf16_bf16_tn_h200.json --residuals
bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json`` (each shape's row from the last table that timed it).

Two parts of the calibration, both in ``agent/costmodel_h200.json``:

* ``params``: the analytic model's constants, fitted as below on measured tables;
* ``residuals`` (``--residuals``, a ``bench/sweep_gemm.py`` table): per sweep shape and declared
  configuration, log(measured / predicted) under those same parameters, which
  :class:`argus_cutlass.agent.costmodel.Residuals` interpolates to new shapes. ``--cv`` scores the
  untuned choice (:func:`argus_cutlass.agent.costmodel.costmodel_choice`) on the sweep with every
  projection (N, K) held out at all its M: the number to quote, since on the sweep's own shapes the
  residuals are in-sample.

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

from typing import Any

import numpy as np

# this checkout's argus_cutlass, not an installed copy (the functions below import it before sweep_gemm /
# agent_eval would put the checkout first, and a second import cannot switch copies)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from argus_cutlass.agent.costmodel import TREND_ALPHA, TREND_FULL_AT, TREND_WEIGHT  # noqa: E402  (the shipped blend)

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


def _timed_rows(table: dict) -> dict:
    """The rows of a table to calibrate on: all of them, or of a graph-timed table (``timing: graph``, made by
    ``bench/sweep_gemm.py --refine --graph``) only those already re-timed from CUDA graphs (the others hold the
    per-launch times their finalists were picked by: ``sweep_gemm.timed_view``).

    >>> sorted(_timed_rows({"timing": "graph", "shapes": {"a": {"timing": "graph"}, "b": {}}}))
    ['a']
    """
    rows = table["shapes"]
    if table.get("timing") != "graph":
        return rows
    return {k: r for k, r in rows.items() if isinstance(r, dict) and r.get("timing") == "graph"}


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
            label = {kernel_label(GemmConfig(**c)): GemmConfig(**c) for c in data.get("candidates", [])}
            # sweep tables (bench/sweep_gemm.py) key kernels by name: their kernel_configs map them
            label.update({nm: GemmConfig(**c) for nm, c in data.get("kernel_configs", {}).items()})
            shapes = _timed_rows(data)
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


def residuals_of(path: str | list[str], params, trend_weight: float | None = TREND_WEIGHT,  # noqa: ANN001
                 trend_alpha: float | None = TREND_ALPHA, **hyper: Any) -> Any:
    """The :class:`~argus_cutlass.agent.costmodel.Residuals` of a sweep table (``bench/sweep_gemm.py``'s
    format) under ``params``: per shape and declared configuration, ``log(measured / predict_ms)``;
    ``hyper`` (``neighbours``, ``m_weight``, ``radius``, ``analytic_weight``) replaces the class defaults; a
    :class:`~argus_cutlass.agent.costmodel.Trend` is fitted on the same values (ridge ``trend_alpha``) and blended
    with ``trend_weight`` (0 or None: none).
    Several tables of one flavor (``path`` a list): each shape's row from the last table that timed it, e.g. the
    per-launch sweep then its graph-timed table (session 28: repeatable labels where it has them, the per-launch
    rows of M = 8192, where a launch costs ~1 ms and the host nothing, elsewhere).

    Raises:
        SystemExit: a table is missing, not a sweep table, or of another flavor than the first (the message
            names it).
    """
    from argus_cutlass.agent.costmodel import Residuals, predict_ms, structure_key
    from argus_cutlass.agent.measure import table_key
    from argus_cutlass.kernels.gemm.space import declared_subspace

    flavor, rows = None, {}
    for one in [path] if isinstance(path, str) else path:
        try:
            data = json.loads(Path(one).read_text())
            fl = data.get("flavor", {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"})
            this = (fl["dtype"], fl["out_dtype"], fl["layout"])
            timed = _timed_rows(data)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{one}: not a sweep table ({type(exc).__name__}: {exc})") from None
        if flavor is not None and this != flavor:
            raise SystemExit(f"{one}: a {'_'.join(this)} table; the residuals are {'_'.join(flavor)}")
        flavor = this
        rows.update(timed)
    assert flavor is not None, "no table"
    space = declared_subspace(*flavor)
    points, values = [], []
    for key, row in rows.items():
        m, n, k = (int(x) for x in key.split("x"))
        kernels = row.get("kernels", {})
        vals = []
        for cfg in space:
            name = table_key(cfg, kernels)
            t = kernels.get(name) if name else None
            vals.append(math.log(t / predict_ms(cfg, m, n, k, params)) if t else float("nan"))
        points.append((m, n, k))
        values.append(vals)
    res = Residuals(flavor, tuple(structure_key(c) for c in space), np.array(points, dtype=np.int64).reshape(-1, 3),
                    np.array(values, dtype=float).reshape(len(points), len(space)),
                    **{key: v for key, v in hyper.items() if v is not None})
    return with_trend(res, params, trend_weight, trend_alpha)


def with_trend(res, params, weight: float | None = TREND_WEIGHT, alpha: float | None = TREND_ALPHA,  # noqa: ANN001, ANN201
               full_at: float = TREND_FULL_AT):
    """``res`` with a :class:`~argus_cutlass.agent.costmodel.Trend` fitted on its values (none for a weight of 0
    or None, or when nothing is measured)."""
    import dataclasses

    from argus_cutlass.agent.costmodel import Trend
    from argus_cutlass.kernels.gemm.space import declared_subspace

    if not weight or not np.isfinite(res.values).any():
        return dataclasses.replace(res, trend=None)
    trend = Trend.fit(res, declared_subspace(*res.flavor), params, alpha=alpha if alpha is not None else TREND_ALPHA,
                      weight=weight, full_at=full_at)
    return dataclasses.replace(res, trend=trend)


#: projections (N, K) closer than this in log2 space are held out together by :func:`cross_validate`
#: (review, session 20: with exact projections held out, a near twin such as K = 3584 beside 4096 stays
#: in and its residuals dominate: 67 % within 3 %; clusters of radius 0.35 give 59 %, the honest figure)
CV_RADIUS = 0.35


def projection_groups(shapes: list[tuple[int, int, int]], radius: float = CV_RADIUS) -> list[list[tuple[int, int, int]]]:
    """The shapes grouped for cross-validation: projections (N, K) joined when within ``radius`` of each other
    in log2 (N, K) space (transitively); a group holds every M of its projections.

    >>> [sorted(g) for g in projection_groups([(1, 4096, 4096), (8, 4096, 3584), (1, 512, 4096)], 0.35)]
    [[(1, 4096, 4096), (8, 4096, 3584)], [(1, 512, 4096)]]
    >>> len(projection_groups([(1, 4096, 4096), (8, 4096, 3584)], 0.0))
    2
    """
    proj = sorted({(n, k) for _, n, k in shapes})
    parent = {p: p for p in proj}

    def root(p: tuple[int, int]) -> tuple[int, int]:
        while parent[p] != p:
            p = parent[p]
        return p

    for i, a in enumerate(proj):
        for b in proj[i + 1:]:
            if math.hypot(math.log2(a[0] / b[0]), math.log2(a[1] / b[1])) < radius:
                parent[root(a)] = root(b)
    groups: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for s in shapes:
        groups.setdefault(root((s[1], s[2])), []).append(s)
    return list(groups.values())


def cross_validate(path: str, params, residuals, radius: float = CV_RADIUS,  # noqa: ANN001
                   redone: str = "") -> dict[str, Any]:
    """Grouped cross-validation of :func:`~argus_cutlass.agent.costmodel.costmodel_choice` on a sweep table:
    each group of :func:`projection_groups` (projections within ``radius`` in log2 (N, K), every M) is held
    out at once (its shapes' residuals removed), and its shapes are scored with the choice the rest gives
    (:func:`sweep_gemm.summarize`). Returns the summary, with ``analytic`` the same score without
    residuals. ``redone`` (a ``sweep_gemm --refine --redo`` label): only the rows re-timed under it are scored
    (a confirm pass still under way), each with only the kernels re-timed under it (``redo_kernels``: the row's
    finalists and the held-out choice, in one process); the groups are formed and held out whole over every
    row, so a partial pass scores the same choices as the full one."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sweep_gemm
    from argus_cutlass.agent.costmodel import costmodel_choice
    from argus_cutlass.agent.measure import table_key

    table = json.loads(Path(path).read_text())
    table = {**table, "shapes": _timed_rows(table)}
    fl = table.get("flavor", {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"})
    flavor = (fl["dtype"], fl["out_dtype"], fl["layout"])
    groups = projection_groups([tuple(int(x) for x in key.split("x")) for key in table["shapes"]], radius)
    if redone:   # the re-timed rows only, each with only the kernels timed under the label (in one process)
        table = {**table, "shapes": {k: {**r, "kernels": {nm: r["kernels"].get(nm) for nm in r.get("redo_kernels", [])}}
                                     for k, r in table["shapes"].items() if r.get("redo") == redone}}
    picks: dict[str, dict[str, str | None]] = {}
    configs: dict[str, Any] = {}   # the held-out choice's configuration per shape (also where the table never timed it)
    for shapes in groups:
        # every calibration shape of the group's projections, also those only the residuals' other tables hold (the
        # per-launch rows of M = 8192: review, session 31)
        projections = {(n, k) for _, n, k in shapes}   # the whole group's, also where redone scores a part of it
        rest = residuals.without([p for p in residuals.points.tolist() if (p[1], p[2]) in projections])
        if residuals.trend is not None:  # refitted without the held-out group (without() drops it)
            rest = with_trend(rest, params, residuals.trend.weight, residuals.trend.alpha, residuals.trend.full_at)
        for m, n, k in shapes:
            key = f"{m}x{n}x{k}"
            if key not in table["shapes"]:   # redone: a row not re-timed yet
                continue
            kernels = table["shapes"][key].get("kernels", {})
            held = costmodel_choice(m, n, k, *flavor, params=params, residuals=rest)
            plain = costmodel_choice(m, n, k, *flavor, params=params, residuals=None)
            picks[key] = {"held_out": held and table_key(held, kernels), "analytic": plain and table_key(plain, kernels)}
            configs[key] = held
    return {"held_out": sweep_gemm.summarize(table, "held_out", picks=picks),
            "analytic": sweep_gemm.summarize(table, "analytic", picks=picks), "groups": len(groups),
            "radius": radius, "configs": configs}


def picks_doc(path: str, configs: dict[str, Any]) -> dict[str, Any]:
    """The held-out choices of :func:`cross_validate` as ``bench/sweep_gemm.py --refine --picks`` reads them:
    ``{"table": path, "rule": ..., "picks": {shape key: {"kernel": kernel name, "config": GemmConfig dict}}}``
    (a shape without a choice is left out). Re-timing them beside each row's finalists in one process scores
    the choice without comparing times of two device sessions (RESULTS.md, session 45)."""
    from argus_cutlass.generate import kernel_name

    return {"table": path, "rule": "costmodel_choice, its projection group held out (calibrate_costmodel --cv)",
            "picks": {key: {"kernel": kernel_name(cfg), "config": cfg.model_dump()}
                      for key, cfg in configs.items() if cfg is not None}}


def main(argv: list[str] | None = None) -> int:
    from argus_cutlass.agent.costmodel import CostParams

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", action="append", default=None,
                    help="measured table (repeatable; default bench/data/agent_eval_table.json)")
    ap.add_argument("--out", default="", help="write the fitted parameters here (e.g. agent/costmodel_h200.json)")
    ap.add_argument("--holdout", action="store_true", help="also score each shape with a fit that did not see it")
    ap.add_argument("--maxiter", type=int, default=600)
    ap.add_argument("--keep-params", action="store_true",
                    help="no fit: keep the shipped parameters (agent/costmodel_h200.json), e.g. to add --residuals")
    ap.add_argument("--residuals", action="append", default=[],
                    help="a sweep table (bench/sweep_gemm.py): store its residuals under the written parameters; "
                    "repeatable (one flavor): each shape's row from the last table that timed it")
    ap.add_argument("--cv-residuals", action="append", default=[],
                    help="--cv: the residuals' tables (repeatable, as --residuals; default: the --cv table itself), "
                    "e.g. scoring on a graph-timed table's repeatable labels with residuals of several tables")
    ap.add_argument("--cv", default="", help="a sweep table: grouped cross-validation of the untuned choice "
                    "(each group of nearby projections held out at all its M) with its residuals; no fit")
    ap.add_argument("--picks-out", default="", metavar="FILE",
                    help="--cv: write the held-out choices (kernel name and configuration per shape) as JSON, for "
                    "bench/sweep_gemm.py --refine --picks FILE to re-time beside each row's finalists")
    ap.add_argument("--cv-redone", default="", metavar="LABEL",
                    help="--cv: score only the rows re-timed by sweep_gemm.py --refine --redo LABEL (a confirm pass "
                    "under way)")
    ap.add_argument("--cv-radius", type=float, default=CV_RADIUS,
                    help="--cv: projections within this log2 distance are held out together (0: exact (N, K))")
    ap.add_argument("--neighbours", type=int, default=None,
                    help="--cv / --residuals: Residuals.neighbours (default: the class's, 3)")
    ap.add_argument("--m-weight", type=float, default=None, help="--cv / --residuals: Residuals.m_weight (default 2)")
    ap.add_argument("--analytic-weight", type=float, default=None,
                    help="--cv / --residuals: Residuals.analytic_weight (default 1: the plain residual mean; 0: the neighbours' measured times alone)")
    ap.add_argument("--trend-weight", type=float, default=None,
                    help=f"--cv / --residuals: the Trend's share of the correction (default {TREND_WEIGHT}; 0: none)")
    ap.add_argument("--trend-alpha", type=float, default=None,
                    help=f"--cv / --residuals: the Trend's ridge strength (default {TREND_ALPHA})")
    args = ap.parse_args(argv)
    if args.trend_weight is not None and not 0.0 <= args.trend_weight <= 1.0:
        ap.error(f"--trend-weight {args.trend_weight}: must be in [0, 1]")
    if args.trend_alpha is not None and not args.trend_alpha > 0.0:
        ap.error(f"--trend-alpha {args.trend_alpha}: must be > 0")
    hyper = _hyper(args)
    if args.cv:
        from argus_cutlass.agent.costmodel import calibrated

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from sweep_gemm import _format

        source = args.cv_residuals or [args.cv]
        res = cross_validate(args.cv, calibrated(), residuals_of(source, calibrated(), **hyper), args.cv_radius,
                             args.cv_redone)
        print(f"grouped cross-validation over {res['groups']} groups of projections (radius {res['radius']}) "
              f"of {args.cv} (residuals of {', '.join(source)}):")
        print(_format(res["held_out"]))
        print(_format(res["analytic"]))
        if args.picks_out:
            doc = picks_doc(args.cv, res["configs"])
            Path(args.picks_out).write_text(json.dumps(doc, indent=1) + "\n")
            print(f"wrote {args.picks_out} ({len(doc['picks'])} held-out choices)")
        return 0
    if args.keep_params:
        return _write_residuals(args) if args.residuals and args.out else _usage(ap)
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
        doc = {"gpu": "NVIDIA H200", "note": note, "params": {f: getattr(fitted, f) for f in CostParams.fields()}}
        if args.residuals:
            doc["residuals_note"], doc["residuals"] = _residuals_doc(args.residuals, fitted, **hyper)
        Path(args.out).write_text(dump_calibration(doc))
        print(f"wrote {args.out}")
    return 0


def dump_calibration(doc: dict[str, Any]) -> str:
    """The calibration file's text: indented JSON, one line per calibration shape of ``residuals``."""
    res = doc.get("residuals")
    if not res:
        return json.dumps(doc, indent=1) + "\n"
    head = json.dumps({**doc, "residuals": {**res, "points": []}}, indent=1)
    rows = ",\n".join("   " + json.dumps(p, separators=(",", ":")) for p in res["points"])
    return head.replace('"points": []', '"points": [\n' + rows + "\n  ]") + "\n"


def _hyper(args) -> dict[str, Any]:  # noqa: ANN001 - the parsed options
    """The Residuals hyper-parameters the command line sets (None: the class default)."""
    return {"neighbours": args.neighbours, "m_weight": args.m_weight, "analytic_weight": args.analytic_weight,
            "trend_weight": TREND_WEIGHT if args.trend_weight is None else args.trend_weight,
            "trend_alpha": args.trend_alpha}


def _residuals_doc(tables: list[str], params, **hyper: Any) -> tuple[str, dict[str, Any]]:  # noqa: ANN001
    res = residuals_of(tables, params, **hyper)
    note = (f"log(measured / predicted) of {len(res.configs)} declared configurations at {len(res.points)} shapes "
            f"of {' then '.join(Path(t).name for t in tables)} ({'_'.join(res.flavor)}; each shape's row from the "
            f"last table that timed it), {time.strftime('%Y-%m-%d')}, by "
            f"bench/calibrate_costmodel.py --residuals; held-out score: --cv")
    return note, res.to_json()


def _write_residuals(args) -> int:  # noqa: ANN001
    """``--keep-params --residuals TABLE --out FILE``: the shipped parameters kept, the residuals replaced."""
    from argus_cutlass.agent.costmodel import CALIBRATION_FILE, calibrated

    src = Path(__file__).resolve().parents[1] / "agent" / CALIBRATION_FILE
    doc = json.loads(src.read_text()) if src.exists() else {"gpu": "NVIDIA H200", "params": {}}
    doc["residuals_note"], doc["residuals"] = _residuals_doc(args.residuals, calibrated(), **_hyper(args))
    Path(args.out).write_text(dump_calibration(doc))
    print(f"wrote {args.out} ({len(doc['residuals']['points'])} calibration shapes)")
    return 0


def _usage(ap) -> int:  # noqa: ANN001
    ap.error("--keep-params needs --residuals TABLE and --out FILE")
    return 2


if __name__ == "__main__":
    sys.exit(main())
