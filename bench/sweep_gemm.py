"""Issue 13's exhaustive sweep: every configuration of the declared GEMM sub-space on a shape set, with
cuBLAS in the same process, resumable across device calls.

    python3 bench/sweep_gemm.py --table bench/data/gemm_sweep_bf16_bf16_tn_h200.json [--shapes models|bench|FILE]
                                [--m 1,8,32] [--dtype bf16 --out-dtype bf16 --layout tn] [--max-seconds 480]
    python3 bench/sweep_gemm.py --table TABLE --summary          # the table's summary (no GPU)
    python3 bench/sweep_gemm.py --table TABLE --merge-shipped    # its per-shape bests into agent/tuned_h200.json
    python3 bench/sweep_gemm.py --table TABLE --merge-shipped --keep-existing   # only shapes the file lacks
    python3 bench/sweep_gemm.py --table TABLE --extend SELECTORS [--m 1,8,32,64]   # configurations added to the sub-space
    python3 bench/sweep_gemm.py --table GRAPH_TABLE --refine --graph --from-table TABLE --m 1,8,32,64 --min-weight-mb 60
    python3 bench/sweep_gemm.py --table GRAPH_TABLE --refine --graph --redo LABEL [--m 1,8]
                                [--refine-within 0.05]   # after a template change: every row's finalists again
    python3 bench/sweep_gemm.py --table GRAPH_TABLE --refine --graph --redo LABEL --picks PICKS.json
                                # ... with the held-out choices (calibrate_costmodel.py --cv --picks-out) beside them

What it measures, per shape (``--shapes models``: :func:`argus_cutlass.agent.shapes.model_shape_set`, every
projection of the model configurations in ``agent/models/`` at M in {1, 8, 32, 64, 100, 256, 512, 1024,
3000, 8192}; ``bench``: ``bench/test_gemm_bench.py``'s 13 shapes; else a ``--shapes FILE`` of
:func:`argus_cutlass.agent.shapes.load_shapes`):

* every configuration of ``bench/agent_eval.py``'s declared sub-space (:func:`agent_eval.subspace` for the
  dtype / output dtype / layout) that the verifier accepts, plus the configuration the heuristic
  (:func:`argus_cutlass.kernels.gemm.heuristics.default_config`) gives each shape when it is not one of
  them (so the untuned choices of today's ``argus-cutlass gemm`` are measured too); each compiled once and
  checked against the fp32 reference on two small problems with residues (``agent_eval._build``);
* swap-AB configurations only on M <= ``argus_cutlass.agent.costmodel.SWAP_AB_MAX_M`` (tens of times
  slower above);
* operands rotated (``agent_eval.measure_shape``): as many sets of (A, B, D) as it takes for
  ``agent_eval.ROTATE_BYTES`` (3 x the H200's
  60 MB L2), at most 48 (so shapes of under ~1.25 MB per set still fit in L2 together), cycled launch by launch, for our kernels and for cuBLAS alike, so a shape whose
  weights fit in L2 is timed reading them from HBM, as a serving loop that runs other layers between two
  calls of this one sees it (and as issue 13 item 2's weight-read floor assumes);
* ``--rounds`` rounds (CUDA events, median of ``--iters`` launches after ``--warmup``; each round starts
  the kernel list at a different point), cuBLAS (torch) before every round and after the last; medians.

Restricted (``--from-table REF``, issue 13 item 4's other flavors: fp16, ``nt``, an fp32 output): per shape,
only the configurations of REF's row within ``--from-within`` (default 10 %) of its best, retargeted to this
run's dtype / output dtype / layout (:func:`from_table_configs`), plus this flavor's heuristic and cost-model
choices; a shape REF lacks gets the whole declared sub-space. ~5-15 kernels per shape instead of ~80, so a
flavor takes one or two device calls; the table records ``restricted`` (REF and the fraction), and its
"sweep's best" is the best of that restriction.

Extended (``--extend SELECTORS``, after the declared sub-space grew): on each swept row (``--m`` to keep some M),
the declared configurations matching a selector (``+``-joined substrings of a kernel name, comma-separated, as
``bench/profile_gemm.py --kernels``) that the row has no time for are timed together with the row's finalists
(:func:`finalists`: within ``--refine-within`` of its best, and the untuned choices), cuBLAS interleaved, as
``--refine`` times them (``--rounds``, default 5): the new kernels do not race one-pass times of another run, and
the re-timed finalists keep their old times in ``kernels_sweep``. A row is marked ``extended`` with what was
added; swap-AB configurations only where M <= ``SWAP_AB_MAX_M``; a row holding every selected configuration that
applies to it is skipped (resumable).

Graph-timed (``--refine --graph``, session 27): one launch between CUDA events times a kernel of tens of
microseconds partly by the host (its per-call cost, 13-26 us on the lent machines, varies between calls: the same
decode kernel read 25.9-29.8 us per launch and 23.6 us from a graph in three calls), so the finalists are re-timed as
back-to-back launches replayed from a CUDA graph (``agent_eval.time_graph``; cuBLAS too), how a serving engine
runs decode. A table is one timing or the other, never both: ``--refine --graph --from-table REF --m ...
--min-weight-mb ...`` makes a table (``timing: graph``) of REF's rows (:func:`graph_table`), or adds to an
existing one the rows it lacks, each row's per-launch times kept as ``kernels_events`` once re-timed; refining a
table with the other timing is refused.

Resumable: ``--table`` is read if it exists and written after every shape; shapes already in it are
skipped. ``--max-seconds`` stops before a shape that would start after that much wall time (the kernels
are compiled again in a new process: ~2-4 min for ~80 kernels on 16 cores), so one device call of 600 s
measures part of the set and the next one goes on from the committed table.

The table is ``bench/agent_eval.py``'s format (``candidates``: GemmConfig dicts; ``shapes``: ``"MxNxK"`` ->
``{"kernels": {kernel name: ms or None}, "cublas_ms", "heuristic": kernel name, "names": [...]}``), so
``bench/calibrate_costmodel.py --table`` fits on it and ``--summary`` (:func:`report`) scores the two untuned
rules (the heuristic, the calibrated cost model's pick: :func:`choices`) against the sweep's best: issue 13 item 1's acceptance is "the untuned choice within 3 % of the
best of the sweep on >= 90 % of the shapes, geomean >= 1.0x cuBLAS, none below 0.9x".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import agent_eval  # noqa: E402  (bench/agent_eval.py: the declared sub-space, the checked build, the timing)
from agent_eval import measure_shape  # noqa: E402

#: a choice within this of the best measured time counts as right (issue 13 item 1)
TIE = 0.03


def table_flavor(table: dict) -> tuple[str, str, str]:
    """A sweep table's ``(dtype, out_dtype, layout)`` (tables before session 21 have no ``flavor``: bf16 -> bf16 tn).

    >>> table_flavor({}), table_flavor({"flavor": {"dtype": "fp16", "out_dtype": "fp32", "layout": "nt"}})
    (('bf16', 'bf16', 'tn'), ('fp16', 'fp32', 'nt'))
    """
    fl = table.get("flavor", {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"})
    return fl["dtype"], fl["out_dtype"], fl["layout"]


def shape_set(spec: str, m_values: list[int] | None, dtype: str, out_dtype: str, layout: str) -> list[Any]:
    """The shapes of ``spec`` (``models``, ``bench`` or a file) with the sweep's dtypes and layout, keeping
    only M in ``m_values`` when given; one entry per (M, N, K) (names merged).

    Raises:
        ProblemError: a bad shapes file (names the row).
    """
    from argus_cutlass.agent.shapes import DEFAULT_M, GemmShape, load_shapes, model_shape_set

    if spec == "models":
        shapes = model_shape_set(m_values or DEFAULT_M, dtype=dtype)
    elif spec.startswith("random:"):
        shapes = calibration_shapes(spec, m_values or DEFAULT_M)
    elif spec == "bench":
        shapes = [GemmShape(m, n, k, name=f"bench.{m}x{n}x{k}") for m, n, k in agent_eval.bench_shapes()]
    else:
        shapes = load_shapes(spec)
    out: dict[tuple[int, int, int], GemmShape] = {}
    for s in shapes:
        if m_values and s.m not in m_values:
            continue
        key = (s.m, s.n, s.k)
        names = (out[key].names if key in out else ()) + tuple(s.names)
        out[key] = GemmShape(s.m, s.n, s.k, dtype=dtype, out_dtype=out_dtype, layout=layout,
                             name="+".join(dict.fromkeys(names)))
    return list(out.values())


def calibration_shapes(spec: str, m_values: Any) -> list[Any]:
    """``random:COUNT[:SEED]``: a calibration set kept apart from the model shape set, so that a cost model
    calibrated on it is scored on the model shapes held out (issue 13 item 1): ``COUNT`` projections (N, K),
    each log-uniform in [256, 65536] and rounded to a multiple of 64 (TMA-aligned, like the models'), none equal
    to a projection of :func:`argus_cutlass.agent.shapes.model_shape_set`, at every M of ``m_values``.

    Raises:
        SystemExit: a malformed spec (names it).

    >>> shapes = calibration_shapes("random:3:1", [1, 256])
    >>> len(shapes), sorted({s.m for s in shapes}), all(s.n % 64 == 0 and s.k % 64 == 0 for s in shapes)
    (6, [1, 256], True)
    """
    import random

    from argus_cutlass.agent.shapes import GemmShape, model_shape_set

    try:
        _, count, *seed = spec.split(":")
        count, seed = int(count), int(seed[0]) if seed else 0
        if count < 1 or len(spec.split(":")) > 3:
            raise ValueError
    except ValueError:
        raise SystemExit(f"--shapes {spec!r}: expected random:COUNT[:SEED] with COUNT >= 1") from None
    taken = {(s.n, s.k) for s in model_shape_set([1])}
    rng = random.Random(seed)
    projections: list[tuple[int, int]] = []
    while len(projections) < count:
        n, k = (max(256, round(2 ** rng.uniform(8, 16) / 64) * 64) for _ in range(2))
        if (n, k) not in taken and (n, k) not in projections:
            projections.append((n, k))
    return [GemmShape(m, n, k, name=f"calib{i}") for i, (n, k) in enumerate(projections) for m in m_values]


def choices(table: dict) -> dict[str, dict[str, str | None]]:
    """Per shape key, the kernel each untuned rule runs for that shape, by the runtime's own code:
    ``heuristic`` (the row's recorded pick, else the name of
    :func:`~argus_cutlass.kernels.gemm.heuristics.default_config` when the table holds it) and
    ``costmodel`` (:func:`argus_cutlass.agent.costmodel.costmodel_choice` for the table's flavor: what
    the default untuned rule, ``ARGUS_GEMM_UNTUNED=costmodel``, runs). A name is None (or names a kernel without a time) when the
    sweep did not measure that choice: :func:`summarize` counts it as a miss. Kernels map to
    configurations through the table's ``kernel_configs`` or, for older tables, its ``candidates``
    (:func:`argus_cutlass.agent.measure.table_key`)."""
    from argus_cutlass.agent.costmodel import costmodel_choice
    from argus_cutlass.agent.measure import table_key
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.heuristics import default_config

    fl = table_flavor(table)
    name_of = {GemmConfig(**c): nm for nm, c in table.get("kernel_configs", {}).items()}

    def name(cfg: Any, row: dict) -> str | None:
        if cfg is None:
            return None
        return name_of.get(cfg) if name_of else table_key(cfg, row.get("kernels", {}))

    out: dict[str, dict[str, str | None]] = {}
    for key, row in table.get("shapes", {}).items():
        m, n, k = map(int, key.split("x"))
        h = row.get("heuristic") if "heuristic" in row else name(default_config(m, n, k, *fl), row)
        out[key] = {"heuristic": h, "costmodel": name(costmodel_choice(m, n, k, *fl), row)}
    return out


def summarize(table: dict, rule: str = "heuristic", tie: float = TIE,
              picks: dict[str, dict[str, str | None]] | None = None) -> dict[str, Any]:
    """Score an untuned rule's choice per shape (``rule``: a key of :func:`choices`, or of ``picks``
    when given) against the sweep, over every shape with a measured kernel: the shapes whose choice is
    within ``tie`` of the best measured kernel (a choice without a time -- not measured, refused,
    failed its check -- is a miss, counted in ``missing``), the geomean regret of the measured choices,
    the geomean and minimum of cuBLAS time / the choice's time and of cuBLAS / the sweep's best.

    >>> t = {"shapes": {"1x2x3": {"kernels": {"a": 1.0, "b": 1.02, "c": None}, "cublas_ms": 1.1},
    ...                 "4x5x6": {"kernels": {"a": 2.0, "b": 1.0}, "cublas_ms": 0.95},
    ...                 "7x8x9": {"kernels": {"a": 1.0, "c": None}, "cublas_ms": 1.0}}}
    >>> s = summarize(t, picks={"1x2x3": {"heuristic": "b"}, "4x5x6": {"heuristic": "a"}, "7x8x9": {"heuristic": "c"}})
    >>> s["shapes"], s["within_tie"], s["missing"], round(s["min_vs_cublas_choice"], 3)
    (3, 1, 1, 0.475)
    """
    picks = choices(table) if picks is None else picks
    rows = []
    for key, row in table.get("shapes", {}).items():
        good = {nm: v for nm, v in row.get("kernels", {}).items() if v}
        if not good:
            continue
        pick = picks.get(key, {}).get(rule)
        best = min(good.values())
        cub = row.get("cublas_ms")
        hit = pick in good
        rows.append({"shape": key, "choice": pick, "regret": good[pick] / best - 1.0 if hit else None,
                     "vs_cublas_choice": cub / good[pick] if cub and hit else None,
                     "vs_cublas_best": cub / best if cub else None})

    def gm(xs: list[float]) -> float:
        xs = [x for x in xs if x]
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")

    measured = [r for r in rows if r["regret"] is not None]
    choice = [r["vs_cublas_choice"] for r in measured if r["vs_cublas_choice"]]
    best = [r["vs_cublas_best"] for r in rows if r["vs_cublas_best"]]
    return {"rule": rule, "shapes": len(rows), "within_tie": sum(r["regret"] <= tie for r in measured),
            "missing": len(rows) - len(measured), "tie": tie,
            "geomean_regret": gm([1.0 + r["regret"] for r in measured]) - 1.0 if measured else float("nan"),
            "geomean_vs_cublas_choice": gm(choice), "min_vs_cublas_choice": min(choice, default=float("nan")),
            "geomean_vs_cublas_best": gm(best), "min_vs_cublas_best": min(best, default=float("nan")),
            "rows": rows}


def _format(s: dict[str, Any]) -> str:
    if not s["shapes"]:
        return f"{s['rule']}: no measured shape with its choice"
    return (f"{s['rule']}: {s['shapes']} shapes, the choice within {s['tie']:.0%} of the sweep's best on "
            f"{s['within_tie']} ({s['within_tie'] / s['shapes']:.0%}; {s['missing']} choices not measured, counted as "
            f"misses), geomean regret of the measured choices {s['geomean_regret']:.1%}; "
            f"cuBLAS time / ours: the choice geomean {s['geomean_vs_cublas_choice']:.3f} "
            f"(min {s['min_vs_cublas_choice']:.3f}), the sweep's best geomean {s['geomean_vs_cublas_best']:.3f} "
            f"(min {s['min_vs_cublas_best']:.3f})")


def bucket_holdout(table: dict, tie: float = TIE) -> dict[str, tuple[int, int, float]]:
    """How the shipped table's two ways of serving a shape it was not swept at do, measured on the table
    itself: each shape that shares its lookup bucket with others is held out, and scored by the kernel
    (a) of the bucket's nearest other shape's best (:func:`shape_entries` + the lookup's
    :func:`~argus_cutlass.agent.store.shape_distance`) and (b) of least geomean time-over-best over the
    bucket's other shapes (the bucket-wide pick). Returns ``{way: (held-out shapes, within tie, geomean
    regret)}``; a shape whose pick was not measured there is left out."""
    from argus_cutlass.agent.planner import Problem
    from argus_cutlass.agent.store import shape_distance

    rows: dict[tuple[int, int, int], dict[str, float]] = {}
    for key, row in table.get("shapes", {}).items():
        good = {nm: v for nm, v in row.get("kernels", {}).items() if v}
        if good:
            rows[tuple(map(int, key.split("x")))] = good
    buckets: dict[str, list[tuple[int, int, int]]] = {}
    for s in rows:
        buckets.setdefault(Problem(*s).bucket(), []).append(s)
    ratios: dict[str, list[float]] = {"nearest": [], "bucket": []}
    for shapes in buckets.values():
        for s in shapes:
            rest = [x for x in shapes if x != s]
            if not rest:
                continue
            best = min(rows[s].values())
            near = min(rest, key=lambda x: shape_distance(x, s))
            pick = min(rows[near], key=rows[near].__getitem__)
            if pick in rows[s]:
                ratios["nearest"].append(rows[s][pick] / best)
            common = set.intersection(*(set(rows[x]) for x in rest)) & set(rows[s])
            if common:
                score = {nm: sum(math.log(rows[x][nm] / min(rows[x].values())) for x in rest) for nm in common}
                ratios["bucket"].append(rows[s][min(sorted(common), key=score.__getitem__)] / best)
    return {way: (len(r), sum(x <= 1 + tie for x in r), math.exp(sum(map(math.log, r)) / len(r)) - 1 if r else 0.0)
            for way, r in ratios.items()}


#: issue 13 item 2: decode is M <= 64; its floor is reading the weights (N x K, 2-byte) once from HBM at the cost
#: model's rate (``agent.costmodel.HBM_BYTES_PER_S``), judged where the weights do not fit in the H200's L2 (the
#: sweep rotates operands over 3 x L2 for every shape: ``agent_eval.ROTATE_BYTES``)
DECODE_MAX_M, L2_BYTES = 64, agent_eval.ROTATE_BYTES // 3


def decode_floor(table: dict, picks: dict[str, dict[str, str | None]] | None = None,
                 limit: float = 1.15) -> dict[str, tuple[int, int, float, float]]:
    """Issue 13 item 2 on the table's decode shapes (M <= 64) whose weights exceed L2: time / the weight-read
    floor (``2 N K`` bytes at 4.3 TB/s) of the sweep's best kernel, of each rule in ``picks`` (``{shape: {rule:
    kernel name}}``) and of cuBLAS. Returns ``{who: (shapes, within limit, geomean ratio, max ratio)}``."""
    from argus_cutlass.agent.costmodel import HBM_BYTES_PER_S

    ratios: dict[str, list[float]] = {}
    for key, row in table.get("shapes", {}).items():
        m, n, k = map(int, key.split("x"))
        if m > DECODE_MAX_M or 2 * n * k <= L2_BYTES:
            continue
        floor = 2 * n * k / HBM_BYTES_PER_S * 1e3
        good = {nm: v for nm, v in row.get("kernels", {}).items() if v}
        if not good:
            continue
        ratios.setdefault("sweep's best", []).append(min(good.values()) / floor)
        for rule, name in (picks or {}).get(key, {}).items():
            if name in good:
                ratios.setdefault(rule, []).append(good[name] / floor)
        if row.get("cublas_ms"):
            ratios.setdefault("cuBLAS", []).append(row["cublas_ms"] / floor)
    return {who: (len(r), sum(x <= limit for x in r), math.exp(sum(map(math.log, r)) / len(r)), max(r))
            for who, r in ratios.items() if r}


def timed_view(table: dict) -> dict:
    """``table`` itself, or for a graph-timed table (``timing: graph``) a shallow copy holding only the rows
    already re-timed from CUDA graphs (the others still hold the per-launch times :func:`graph_table` copied to
    pick their finalists): what every score, summary and calibration of a table reads.

    >>> sorted(timed_view({"timing": "graph", "shapes": {"a": {"timing": "graph"}, "b": {}}})["shapes"])
    ['a']
    """
    if table.get("timing") != "graph":
        return table
    return {**table, "shapes": {k: row for k, row in table.get("shapes", {}).items() if row.get("timing") == "graph"}}


def repeatability(table: dict, tie: float = TIE) -> tuple[int, int] | None:
    """How far the ``tie`` criterion is reproducible on the table itself: on each row that holds a first graph
    timing (``kernels_graph_first``) beside a later one (``kernels``) of at least two common kernels, the kernel
    the first timing ranks fastest, scored by the later timing against the later best of those kernels -- what a
    choice that knew the first measurement exactly would score. Returns ``(rows, within tie)``, None where no
    row was timed twice.

    >>> repeatability({"shapes": {"a": {"kernels": {"x": 1.0, "y": 1.05}, "kernels_graph_first": {"x": 1.1, "y": 1.0}},
    ...                           "b": {"kernels": {"x": 1.0, "y": 1.01}, "kernels_graph_first": {"x": 1.1, "y": 1.0}}}})
    (2, 1)
    """
    rows = hits = 0
    for row in table.get("shapes", {}).values():
        now = {nm: v for nm, v in row.get("kernels", {}).items() if v}
        first = {nm: v for nm, v in row.get("kernels_graph_first", {}).items() if v and nm in now}
        if len(first) < 2:
            continue
        rows += 1
        hits += now[min(first, key=first.__getitem__)] <= (1.0 + tie) * min(now[nm] for nm in first)
    return (rows, hits) if rows else None


def report(table: dict) -> str:
    """The summary lines of both untuned rules (:func:`choices`) on :func:`timed_view`'s rows."""
    from argus_cutlass.agent.costmodel import calibrated_residuals

    table = timed_view(table)
    picks = choices(table)
    lines = [_format(summarize(table, rule, picks=picks)) for rule in ("heuristic", "costmodel")]
    res = calibrated_residuals()
    seen = {f"{m}x{n}x{k}" for m, n, k in res.points.tolist()} if res is not None else set()
    both = len(seen & set(table.get("shapes", {})))
    if both and res is not None and table_flavor(table) == tuple(res.flavor):
        lines.append(f"  (costmodel is in-sample on {both} of these shapes: the shipped residuals were measured there; "
                     f"the held-out score is `python bench/calibrate_costmodel.py --cv TABLE`)")
    elif both and res is not None:
        lines.append(f"  (costmodel: the shipped residuals were measured at {both} of these shapes in "
                     f"{' '.join(res.flavor)}, not in this flavor: a transfer across flavors at the calibration shapes, "
                     f"not a held-out score)")
    for who, (n, hits, geo, worst) in decode_floor(table, picks).items():
        lines.append(f"decode (M <= {DECODE_MAX_M}, weights > L2), {who}: within 1.15x of the weight-read floor on "
                     f"{hits} of {n}, geomean {geo:.3f}x, worst {worst:.3f}x")
    rep = repeatability(table)
    if rep:
        lines.append(f"repeatability of the {TIE:.0%} criterion: on {rep[0]} rows timed twice from CUDA graphs, the kernel "
                     f"the first timing ranks fastest is within {TIE:.0%} of the second timing's best on {rep[1]} "
                     f"({rep[1] / rep[0]:.0%}): a choice that knew the first measurement exactly")
    for way, (n, hits, regret) in bucket_holdout(table).items():
        what = ("the bucket's nearest swept shape's best kernel (the shipped table's lookup)" if way == "nearest"
                else "the bucket-wide pick (least geomean time-over-best of the other shapes)")
        lines.append(f"shape held out of its bucket, served by {what}: within 3% on {hits} of {n}, "
                     f"geomean regret {100 * regret:.1f}%")
    return "\n".join(lines)


def shape_entries(table: dict) -> list[dict[str, Any]]:
    """The table's measurements as entries of ``agent/tuned_h200.json``, one per swept shape: the kernel
    with the least measured time there (its ``ms``, the row's ``cublas_ms``). Entries of one lookup bucket
    (:func:`argus_cutlass.agent.store.entry_key`: M, N, K rounded up to powers of two) measured at several
    shapes are all kept; the lookup takes the one measured nearest the problem
    (:func:`argus_cutlass.agent.store.shape_distance`); each entry says how its times were taken (``timing``:
    ``graph`` for a graph-timed row, else ``launch``). On the session-20 table, holding each shape out of
    its bucket, the nearest shape's best kernel was within 3 % of the held-out shape's best on 207 of 290
    shapes (geomean regret 4.1 %), the bucket-wide pick of least geomean time-over-best 204 (3.9 %): equal
    on unseen shapes, while a swept shape gets its own best. Needs the table's ``kernel_configs``.

    Raises:
        ValueError: the table has no ``kernel_configs``.
    """
    from argus_cutlass.agent.planner import Problem
    from argus_cutlass.agent.store import make_entry
    from argus_cutlass.kernels.gemm.config import GemmConfig

    if not table.get("kernel_configs"):
        raise ValueError("the table has no kernel_configs (written by bench/sweep_gemm.py since session 19)")
    configs = {nm: GemmConfig(**c) for nm, c in table["kernel_configs"].items()}
    fl = table_flavor(table)
    gpu = table.get("gpu", "NVIDIA H200")
    out = []
    for key, row in timed_view(table).get("shapes", {}).items():   # (not yet re-timed graph rows: per-launch)
        good = {nm: v for nm, v in row.get("kernels", {}).items() if v and nm in configs}
        if not good:
            continue
        m, n, k = map(int, key.split("x"))
        best = min(sorted(good), key=good.__getitem__)
        p = Problem(m, n, k, *fl)
        out.append(make_entry(gpu, "gemm", p, configs[best], good[best], row.get("cublas_ms"),
                              timing="graph" if row.get("timing") == "graph" else "launch"))
    return out


def finalists(row: dict, within: float = 0.10, extra: tuple[str | None, ...] = ()) -> list[str]:
    """The kernels of a table row worth re-timing: those within ``within`` of the row's best measured time,
    plus the ``extra`` names (the untuned rules' choices) that have a time, in the row's order.

    >>> finalists({"kernels": {"a": 1.0, "b": 1.09, "c": 1.2, "d": None}}, extra=("c", "d", None))
    ['a', 'b', 'c']
    """
    good = {nm: v for nm, v in row.get("kernels", {}).items() if v}
    if not good:
        return []
    best = min(good.values())
    keep = {nm for nm, v in good.items() if v <= (1.0 + within) * best} | {nm for nm in extra if nm in good}
    return [nm for nm in good if nm in keep]


def from_table_configs(ref: dict, key: str, flavor: dict[str, str], within: float = 0.10,
                       declared: list[Any] | None = None) -> list[Any] | None:
    """The configurations of ``ref``'s row ``key`` within ``within`` of its best measured time, each with
    ``flavor``'s dtype / out_dtype / layout (in the row's order, duplicates dropped); None when ``ref`` has
    no measured row for ``key`` (the caller then sweeps the whole sub-space there). With ``declared`` (the
    flavor's declared sub-space), a configuration of the same structure but another pipeline depth is
    replaced by the declared one (an fp32 output stages its epilogue in more shared memory, so the
    sub-space gives 128x192 tiles 4 stages where bf16 has 5: the bf16 depth would not fit).

    Raises:
        ValueError: ``ref`` has no ``kernel_configs`` (a table written before session 19).

    >>> from argus_cutlass.kernels.gemm.config import GemmConfig
    >>> a, b = GemmConfig(tile_n=128), GemmConfig(tile_n=256)
    >>> ref = {"kernel_configs": {"a": a.model_dump(), "b": b.model_dump()},
    ...        "shapes": {"8x64x64": {"kernels": {"a": 1.0, "b": 1.2}}}}
    >>> [(c.tile_n, c.dtype, c.layout) for c in from_table_configs(ref, "8x64x64", {"dtype": "fp16",
    ...  "out_dtype": "fp16", "layout": "nt"})], from_table_configs(ref, "1x1x1", {})
    ([(128, 'fp16', 'nt')], None)
    """
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.gemm.config import GemmConfig

    if not ref.get("kernel_configs"):
        raise ValueError("the reference table has no kernel_configs (written by bench/sweep_gemm.py since session 19)")
    row = ref.get("shapes", {}).get(key)
    names = finalists(row, within) if row else []
    if not names:
        return None
    from argus_cutlass.agent.costmodel import structure_key

    twin = {structure_key(d, stages=False): d for d in (declared or [])}
    out = []
    for nm in names:
        if nm not in ref["kernel_configs"]:
            continue
        try:   # a structure the flavor refuses (e.g. an epilogue tile an fp32 output cannot stage) is dropped
            c = GemmConfig(**ref["kernel_configs"][nm]).replace(**flavor)
        except (ArgusError, ValueError):
            continue
        out.append(twin.get(structure_key(c, stages=False), c))
    return list(dict.fromkeys(out))


def refine_iters(best_ms: float, budget_ms: float = 25.0, lo: int = 20, hi: int = 200) -> int:
    """Launches per timing of a refine round: about ``budget_ms`` of kernel time, within [lo, hi].

    >>> refine_iters(0.025), refine_iters(1.0), refine_iters(10.0)
    (200, 25, 20)
    """
    return max(lo, min(hi, int(budget_ms / max(best_ms, 1e-6))))


def _add_candidates(table: dict, configs: Iterable[Any]) -> None:
    """Append to the table's ``candidates`` the configurations it does not list yet, compared as configurations (a
    candidate written before a field existed, e.g. ``pdl``, omits its default)."""
    from argus_cutlass.kernels.gemm.config import GemmConfig

    known = {GemmConfig(**c) for c in table.get("candidates", [])}
    table["candidates"] = table.get("candidates", []) + [c.model_dump() for c in configs if c not in known]


def _retime_setup(path: Path, table: dict, verb: str) -> dict[str, Any] | None:
    """What ``--refine`` and ``--extend`` both need first: a Hopper GPU and the table's ``kernel_configs`` (to
    rebuild its kernels). The configurations by kernel name, or None after saying why not."""
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.runtime.cuda import require_sm90

    if not table.get("kernel_configs"):
        print(f"sweep_gemm --{verb}: {path} has no kernel_configs (written by this script's sweeps since session "
              f"19): its kernels cannot be rebuilt", file=sys.stderr)
        return None
    try:
        info = require_sm90()
    except ArgusError as exc:
        print(f"sweep_gemm --{verb}: needs a Hopper GPU: {exc}", file=sys.stderr)
        return None
    if table.get("gpu") and getattr(info, "name", table["gpu"]) != table["gpu"]:
        print(f"sweep_gemm --{verb}: {path} was timed on {table['gpu']}, this is {info.name}: a table never mixes the "
              "times of two GPU models (sweep a table of its own for this one)", file=sys.stderr)
        return None
    return {nm: GemmConfig(**c) for nm, c in table["kernel_configs"].items()}


def _rows_to_time(table: dict, plan: dict[str, list[str]], configs: dict[str, Any], args: argparse.Namespace,
                  t0: float, verb: str) -> Iterator[tuple[str, dict, dict[str, Any]]]:
    """Build every kernel of ``plan`` (row key -> kernel names, in the order to time the rows) once, then yield
    ``(key, row, {name: built library})`` per row until ``--max-seconds`` have passed since ``t0`` (said)."""
    names = sorted({nm for nms in plan.values() for nm in nms})
    libs = agent_eval._build([configs[nm] for nm in names], args.workers or 16, table.setdefault("failures", []), [])
    for done, key in enumerate(plan):
        if time.perf_counter() - t0 > args.max_seconds:
            print(f"stopping: {args.max_seconds:.0f} s spent; {len(plan) - done} shapes left to {verb}")
            return
        yield key, table["shapes"][key], {nm: libs[nm] for nm in plan[key] if nm in libs}


def _retime(table: dict, key: str, libs: dict[str, Any], names: list[str], args: argparse.Namespace,
            tag: str, graph: bool = False) -> tuple[int, dict]:
    """Time ``libs`` on row ``key`` as ``--refine`` does (``--rounds`` rounds of :func:`refine_iters` launches,
    cuBLAS interleaved) and record it: each of ``names`` gets its new time (None where it has none: a one-pass
    time is never compared against these medians); a kernel or cuBLAS time the row already held is kept, the
    first one recorded, in ``kernels_sweep`` / ``cublas_ms_sweep``. ``graph``: timed as back-to-back launches
    replayed from a CUDA graph (``agent_eval.time_graph``); the row's per-launch times move to ``kernels_events``
    / ``cublas_ms_events`` and its ``kernels`` hold only these (the two modes are never mixed in a row). A row
    already graph-timed (``--extend`` of a graph table) keeps its other kernels' graph times; the first graph
    time of each re-timed kernel and of cuBLAS is kept in ``kernels_graph_first`` / ``cublas_ms_graph_first``.
    Returns the launches per timing and ``measure_shape``'s result."""
    from argus_cutlass.agent.shapes import GemmShape

    row = table["shapes"][key]
    m, n, k = map(int, key.split("x"))
    iters = refine_iters(min((v for v in row["kernels"].values() if v), default=1.0))
    got = measure_shape(libs, GemmShape(m, n, k, *table_flavor(table), name=f"{tag}.{key}"), args.warmup, iters,
                        args.rounds, table.setdefault("failures", []), graph=graph)
    regraph = graph and row.get("timing") == "graph"
    kept = _first_times(row, graph)   # before a first graph timing moves the row's times to kernels_events
    if graph and not regraph:
        row["kernels_events"], row["kernels"] = row["kernels"], {}
        row["cublas_ms_events"], row["cublas_ms"] = row.get("cublas_ms"), None
        row["timing"] = "graph"
    for nm in names:
        if nm in row["kernels"]:
            kept.setdefault(nm, row["kernels"][nm])
    row["kernels"].update({nm: got["kernels"].get(nm) or None for nm in names})
    if got.get("cublas_ms"):
        if regraph:
            row.setdefault("cublas_ms_graph_first", row.get("cublas_ms"))
        elif not graph:
            row.setdefault("cublas_ms_sweep", row.get("cublas_ms"))
        row["cublas_ms"] = got["cublas_ms"]
    return iters, got


def _first_times(row: dict, graph: bool) -> dict:
    """Where a re-timed row keeps each kernel's first time: ``kernels_graph_first`` on a graph-timed row,
    ``kernels_sweep`` on a per-launch one re-timed per launch; none (a new dict) on a row about to get its first
    graph timing (its per-launch times move to ``kernels_events`` whole)."""
    if row.get("timing") == "graph":
        return row.setdefault("kernels_graph_first", {})
    return {} if graph else row.setdefault("kernels_sweep", {})


def load_picks(path: Path, table: dict) -> dict[str, tuple[str, Any]]:
    """The choices of a ``--picks`` file (``bench/calibrate_costmodel.py --cv --picks-out``) for ``table``:
    ``{shape key: (kernel name, GemmConfig)}``, each key a row of the table written canonically (``MxNxK``), each
    configuration of the table's flavor (dtype, output dtype, layout: the timing draws the table's operands),
    checked by the fast verifier tiers (:func:`~argus_cutlass.kernels.gemm.space.feasible`), and its name its
    kernel's.

    Raises:
        ValueError: not JSON, no ``picks`` object, a malformed or non-canonical shape key or one the table lacks, a
            configuration that does not parse, of another flavor, refused by the verifier, or whose kernel name is
            not the one given (the message names the row).
    """
    from pydantic import ValidationError

    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.space import feasible

    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("picks"), dict):
        raise ValueError("expected a JSON object with a 'picks' object (calibrate_costmodel.py --cv --picks-out)")
    out: dict[str, tuple[str, Any]] = {}
    for key, pick in doc["picks"].items():
        try:
            m, n, k = (int(x) for x in key.split("x"))
            if min(m, n, k) < 1 or key != f"{m}x{n}x{k}":
                raise ValueError
        except ValueError:
            raise ValueError(f"row {key!r}: a shape key is MxNxK of positive integers, written without leading "
                             "zeros") from None
        if key not in table.get("shapes", {}):
            raise ValueError(f"row {key}: not a row of the table (picks of another table?)")
        try:
            cfg = GemmConfig(**pick["config"])
        except (TypeError, KeyError, ValidationError) as exc:
            raise ValueError(f"row {key}: no valid 'config' ({str(exc).splitlines()[0]})") from None
        if (cfg.dtype, cfg.out_dtype, cfg.layout) != table_flavor(table):
            raise ValueError(f"row {key}: the configuration is {cfg.dtype} -> {cfg.out_dtype} {cfg.layout}, the table "
                             f"{' -> '.join(table_flavor(table)[:2])} {table_flavor(table)[2]}")
        ok, why = feasible(cfg)
        if not ok:
            raise ValueError(f"row {key}: the configuration is refused by the verifier: {'; '.join(why)[:200]}")
        if pick.get("kernel") != kernel_name(cfg):
            raise ValueError(f"row {key}: kernel {pick.get('kernel')!r} is not its configuration's ({kernel_name(cfg)})")
        out[key] = (pick["kernel"], cfg)
    return out


def graph_table(src: dict, m_values: list[int], min_weight_mb: float) -> dict:
    """A new table for ``--refine --graph``: ``src``'s flavor, kernel configurations and the rows at
    ``m_values`` (all M when empty) whose B operand (``N x K`` elements) holds at least ``min_weight_mb`` MiB,
    their per-launch times kept (they pick the finalists to re-time), marked ``timing: graph``.

    Raises:
        KeyError: ``src`` is not a sweep table.

    >>> t = graph_table({"flavor": {"dtype": "bf16"}, "kernel_configs": {}, "shapes": {
    ...     "1x8192x8192": {"kernels": {"a": 1.0}}, "1x64x64": {"kernels": {}}, "8x8192x8192": {}}}, [1], 100)
    >>> sorted(t["shapes"]), t["timing"]
    (['1x8192x8192'], 'graph')
    """
    elem = 4 if src.get("flavor", {}).get("dtype") == "fp32" else 2
    keep = {}
    for key, row in src["shapes"].items():
        m, n, k = map(int, key.split("x"))
        if (not m_values or m in m_values) and n * k * elem >= min_weight_mb * 2**20:
            keep[key] = {nm: v for nm, v in row.items() if nm in ("kernels", "cublas_ms", "names", "heuristic")}
    return {**{nm: v for nm, v in src.items() if nm not in ("shapes", "failures")}, "timing": "graph",
            "shapes": keep}


def refine(path: Path, table: dict, args: argparse.Namespace, t0: float) -> int:
    """``--refine``: re-time each row's :func:`finalists` (and the heuristic's and the cost model's choices)
    with ``--rounds`` rounds of :func:`refine_iters` launches, cuBLAS interleaved as in the sweep; the new
    medians replace the row's times (the sweep's kept in ``kernels_sweep`` / ``cublas_ms_sweep``) and the row
    is marked ``refined``. Smallest M first, resumable, stops after ``--max-seconds``: the one-pass sweep's
    20 launches per kernel leave a kernel under 50 us a 90th-percentile spread of 4-13 %, more than the 3 %
    the untuned choice is scored by. With ``args.graph`` the table must be graph-timed (``timing: graph``, from
    :func:`graph_table`) and the re-timing is from CUDA graphs (:func:`_retime`); a row is done once its
    ``timing`` is ``graph``. ``args.redo`` (a label; after a template change): every row with times is
    re-timed once more, done once marked ``redo: label`` (its first ``refined`` record kept as
    ``refined_first``; a row none of whose finalists builds any more has their times moved to the kept first
    times and set to None, the names in ``redo_failed``). ``args.m`` (comma-separated) keeps the rows of those
    M. Returns 2, saying why, when the table's timing and ``args.graph`` disagree, when
    there is no Hopper GPU, or when the table has no ``kernel_configs``."""
    graph = bool(getattr(args, "graph", False))
    if graph != (table.get("timing") == "graph"):
        print(f"sweep_gemm --refine: {path} is timed {'from CUDA graphs' if table.get('timing') == 'graph' else 'per launch'}: "
              f"refine it {'with' if table.get('timing') == 'graph' else 'without'} --graph (a table never mixes the two)",
              file=sys.stderr)
        return 2
    configs = _retime_setup(path, table, "refine")
    if configs is None:
        return 2
    picks = choices(table)
    redo = getattr(args, "redo", "")
    if redo:   # a template change: every row again, once per label (resumable like the first pass)
        def done(row: dict) -> bool:
            return row.get("redo") == redo
    else:
        done = (lambda row: row.get("timing") == "graph") if graph else (lambda row: row.get("refined"))
    keep_m = {int(x) for x in getattr(args, "m", "").split(",") if x.strip()}   # main() refused a bad --m
    todo = sorted((key for key, row in table["shapes"].items() if row.get("kernels") and not done(row)
                   and (not keep_m or int(key.split("x")[0]) in keep_m)),
                  key=lambda key: tuple(map(int, key.split("x"))))
    plan = {key: [nm for nm in finalists(table["shapes"][key], args.refine_within,
                                         tuple(picks.get(key, {}).values())) if nm in configs] for key in todo}
    extra = {}
    if getattr(args, "picks", ""):
        try:
            extra = load_picks(Path(args.picks), table)
        except (OSError, ValueError) as exc:
            print(f"sweep_gemm --refine --picks {args.picks}: {exc}", file=sys.stderr)
            return 2
    if extra:   # the held-out choices, timed or not on the row, each beside the row's finalists
        configs = {**configs, **{nm: cfg for nm, cfg in extra.values()}}
        for key in todo:
            if key in extra and extra[key][0] not in plan[key]:
                plan[key].append(extra[key][0])
        table.setdefault("kernel_configs", {}).update({nm: cfg.model_dump() for nm, cfg in extra.values()})
    print(f"refining {len(todo)} shapes: {sum(map(len, plan.values()))} timings of "
          f"{len({nm for nms in plan.values() for nm in nms})} kernels", flush=True)
    for key, row, sub in _rows_to_time(table, plan, configs, args, t0, "refine"):
        if not sub and redo:   # none builds on the changed template: their earlier times no longer stand
            kept = _first_times(row, graph)
            for nm in plan[key]:
                kept.setdefault(nm, row["kernels"].get(nm))
                row["kernels"][nm] = None
            row["redo"], row["redo_failed"] = redo, plan[key]
            _save(path, table)
            continue
        if not sub:   # no finalist built: marked, so a resumed run does not rebuild for it again
            row["refined"] = {"within": args.refine_within, "kernels": 0, "failed": plan[key]}
            if graph:   # nothing graph-timed: the row holds no time rather than per-launch ones
                row["kernels_events"], row["kernels"], row["timing"] = row["kernels"], {}, "graph"
                row["cublas_ms_events"], row["cublas_ms"] = row.get("cublas_ms"), None
            _save(path, table)
            continue
        t1 = time.perf_counter()
        iters, new = _retime(table, key, sub, plan[key], args, "refine", graph)
        # every finalist gets its refined time or none: a finalist that did not build or time keeps no one-pass
        # time (it could be the sweep's lucky best, compared against 5-round medians); the old ones stay apart
        failed = [nm for nm in plan[key] if not new["kernels"].get(nm)]
        if redo and "refined" in row:
            row.setdefault("refined_first", row["refined"])
        row["refined"] = {"within": args.refine_within, "rounds": args.rounds, "iters": iters,
                          "kernels": len(plan[key]) - len(failed), "failed": failed,
                          **({"graph_calls": new["graph_calls"]} if graph and "graph_calls" in new else {})}
        if redo:   # the kernels this label timed, in one process: what a score of the re-timed rows compares
            row["redo"], row["redo_kernels"] = redo, [nm for nm in plan[key] if new["kernels"].get(nm)]
        _save(path, table)
        print(f"{key:>18} refined {len(sub)} kernels x {args.rounds} rounds x {iters} launches "
              f"({time.perf_counter() - t1:.1f} s)", flush=True)
    _save(path, table)
    print(report(table))
    return 0


def _extended_note(table: dict) -> str:
    """The merge note's clause for rows ``--extend`` added configurations to ('' when none was)."""
    rows = [row for row in table["shapes"].values() if row.get("extended")]
    if not rows:
        return ""
    added = {nm for row in rows for ext in row["extended"] for nm in ext.get("added", [])}
    return (f"; {len(rows)} rows extended (bench/sweep_gemm.py --extend) with {len(added)} "
            f"configuration{'s' if len(added) != 1 else ''} added to the declared sub-space later, timed beside each "
            "row's finalists")


def _redo_note(table: dict) -> str:
    """The merge note's clause for rows re-timed by ``--refine --redo LABEL`` ('' when none was)."""
    labels: dict[str, tuple[int, float]] = {}   # label -> (rows, the largest --refine-within recorded)
    for row in table["shapes"].values():
        if row.get("redo"):
            n, within = labels.get(row["redo"], (0, 0.0))
            labels[row["redo"]] = (n + 1, max(within, row.get("refined", {}).get("within", 0.0)))
    return "".join(f"; {n} rows' finalists re-timed after a template change (bench/sweep_gemm.py --refine "
                   f"--redo {label}, within {within:.0%} of each row's best; the rows' other kernels keep their "
                   "earlier times)" for label, (n, within) in sorted(labels.items()))


def cluster_k_ctas(cfg: Any, m: int, n: int, k: int) -> int:
    """CTAs a cluster-K kernel launches on ``m x n x k`` (``templates/gemm/host.j2``: one output tile per cluster
    of ``splits`` CTAs, not persistent); 0 for every other decomposition (a persistent grid of at most one
    wave). ``--extend --max-ctas N`` skips an added kernel on the rows where this exceeds N.

    >>> from argus_cutlass.kernels.gemm.config import GemmConfig
    >>> c = GemmConfig(tile_m=128, tile_n=16, cluster_m=1, scheduler="clusterk", splits=8, swap_ab=True)
    >>> cluster_k_ctas(c, 1, 1024, 8192), cluster_k_ctas(c.replace(scheduler="persistent", splits=1), 1, 1024, 8192)
    (64, 0)
    """
    if cfg.scheduler != "clusterk":
        return 0
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    return GemmProblem(m, n, k, cfg.dtype, cfg.out_dtype, cfg.layout).launched_units(cfg)


def extend(path: Path, table: dict, added: dict[str, Any], m_values: list[int] | None, args: argparse.Namespace,
           t0: float) -> int:
    """``--extend``: time ``added`` (kernel name -> configuration of the declared sub-space) on the table's rows
    that lack them (module docstring), each with the row's finalists, and record them; resumable, smallest M
    first, stops after ``--max-seconds``. A graph-timed table (``timing: graph``) is extended from CUDA graphs, on
    its re-timed rows only (:func:`_retime`: the added kernels, the row's finalists and cuBLAS re-timed in one
    process; the row's other kernels keep their graph times)."""
    from argus_cutlass.agent.costmodel import SWAP_AB_MAX_M
    from argus_cutlass.kernels.gemm.space import feasible

    configs = _retime_setup(path, table, "extend")
    if configs is None:
        return 2
    log = table.setdefault("failures", [])
    ok = {}
    for nm, cfg in added.items():   # the verifier's refusals are logged, as the sweep logs them
        good, why = feasible(cfg)
        if good:
            ok[nm] = cfg
        else:
            log.append({"kernel": cfg.model_dump(), "phase": "verify", "error": "; ".join(why)})
            print(f"-- {nm}: refused by the verifier: {'; '.join(why)[:200]}")
    picks = choices(table)

    def missing(key: str) -> list[str]:
        m, n, k = map(int, key.split("x"))
        row = table["shapes"][key]
        return [nm for nm, c in ok.items() if nm not in row.get("kernels", {}) and not (c.swap_ab and m > SWAP_AB_MAX_M)
                and not (args.max_ctas and cluster_k_ctas(c, m, n, k) > args.max_ctas)]

    graph = table.get("timing") == "graph"
    # rows with at least one time (a row whose kernels all failed has no finalists to time the added ones beside);
    # of a graph table only its re-timed rows (the others still hold the per-launch times they were picked by)
    added_of = {key: missing(key) for key, row in table["shapes"].items()
                if any(row.get("kernels", {}).values()) and (m_values is None or int(key.split("x")[0]) in m_values)
                and (not graph or row.get("timing") == "graph")}
    todo = sorted((key for key, names in added_of.items() if names), key=lambda key: tuple(map(int, key.split("x"))))
    plan = {key: added_of[key] + [nm for nm in finalists(table["shapes"][key], args.refine_within,
                                                          tuple(picks.get(key, {}).values()))
                                  if nm in configs and nm not in added_of[key]]
            for key in todo}
    print(f"extending {len(todo)} shapes with {len(ok)} configurations: {sum(map(len, plan.values()))} timings of "
          f"{len({nm for nms in plan.values() for nm in nms})} kernels", flush=True)
    if not todo:
        print(report(table))
        return 0
    _add_candidates(table, ok.values())
    for key, row, sub in _rows_to_time(table, plan, {**configs, **ok}, args, t0, "extend"):
        new_names = added_of[key]   # missing from the row; the rest of the plan is re-timed
        if not sub:   # nothing built: the added kernels are recorded untimed, so a resumed run skips the row
            row["kernels"].update({nm: None for nm in new_names})
            row.setdefault("extended", []).append({"added": new_names, "kernels": 0})
            _save(path, table)
            continue
        table["kernel_configs"].update({nm: ok[nm].model_dump() for nm in new_names if nm in sub})
        t1 = time.perf_counter()
        old = [nm for nm in plan[key] if nm not in new_names]
        iters, _ = _retime(table, key, sub, plan[key], args, "extend", graph=graph)
        row.setdefault("extended", []).append({"added": new_names, "rounds": args.rounds, "iters": iters,
                                               "retimed": old})
        _save(path, table)
        good = {nm: v for nm, v in row["kernels"].items() if v}
        winner = min(good, key=good.get) if good else None
        print(f"{key:>18} +{len(new_names)} kernels; best now {winner and round(good[winner], 4)} ms"
              f"{' (an added one)' if winner in new_names else ''}  ({time.perf_counter() - t1:.1f} s)", flush=True)
    _save(path, table)
    print(report(table))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True, help="the sweep table (read when it exists, written after every shape)")
    ap.add_argument("--shapes", default="models", help="models (default), bench, random:COUNT[:SEED] (a calibration "
                    "set apart from the models': calibration_shapes), or a JSON / CSV shapes file")
    ap.add_argument("--m", default="", help="comma-separated M values to keep (default: all of the set)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--out-dtype", default=None, choices=("bf16", "fp16", "fp32"), help="default: --dtype")
    ap.add_argument("--layout", default="tn", choices=("tn", "nt", "nn", "tt"))
    ap.add_argument("--max-seconds", type=float, default=480.0, help="start no shape after this much wall time")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds (default 2; --refine: 5)")
    ap.add_argument("--workers", type=int, default=None, help="parallel nvcc (default: CPU count)")
    ap.add_argument("--exclude", default="", help="comma-separated substrings of kernel names not to build "
                    "(added to the table's 'exclude', with the kernel a fatal shape stopped at)")
    ap.add_argument("--summary", action="store_true", help="print the table's summary and exit (no GPU)")
    ap.add_argument("--merge-shipped", action="store_true",
                    help="merge the table's per-shape bests into agent/tuned_h200.json and exit (no GPU)")
    ap.add_argument("--keep-existing", action="store_true",
                    help="--merge-shipped: add only the shapes agent/tuned_h200.json has no entry for (an entry "
                    "tuned with its own interleaved measurement stays)")
    ap.add_argument("--from-table", default="",
                    help="a swept table of another flavor (e.g. the bf16 tn one): per shape, sweep only its "
                         "configurations within --from-within of that row's best, retargeted to this flavor")
    ap.add_argument("--from-within", type=float, default=0.10, help="--from-table: the fraction of the row's best")
    ap.add_argument("--refine", action="store_true",
                    help="re-time each shape's finalists of the table (GPU; --rounds, default 5 here) instead of sweeping")
    ap.add_argument("--graph", action="store_true",
                    help="--refine: time as back-to-back launches replayed from a CUDA graph (how a serving engine "
                         "runs decode; agent_eval.time_graph), cuBLAS too, into a table of its own: with --from-table "
                         "the rows of that table at --m with weights (B) of at least --min-weight-mb that --table "
                         "lacks are added first (--table made when absent), each row's per-launch times kept as "
                         "kernels_events once re-timed")
    ap.add_argument("--redo", default="", metavar="LABEL",
                    help="--refine: re-time the finalists of every row again, refined before or not (after "
                         "a template change), each row marked redo: LABEL once done (resumable; --m keeps "
                         "some M); the rows' first times stay in kernels_sweep / kernels_graph_first, their "
                         "other kernels keep their times")
    ap.add_argument("--min-weight-mb", type=float, default=0.0,
                    help="--refine --graph: a new table takes the rows whose B (N x K) has at least this many MiB")
    ap.add_argument("--picks", default="", metavar="FILE",
                    help="--refine: also re-time each row's choice named in FILE (bench/calibrate_costmodel.py --cv "
                    "--picks-out: the held-out choices) beside its finalists, whether the row timed it or not")
    ap.add_argument("--refine-within", type=float, default=0.10,
                    help="--refine / --extend: the kernels within this fraction of a shape's best are finalists")
    ap.add_argument("--max-ctas", type=int, default=0, metavar="N",
                    help="--extend: skip an added cluster-K kernel on a row where it would launch more than N CTAs "
                         "(one tile per cluster; 0: no limit)")
    ap.add_argument("--extend", default="", metavar="SELECTORS",
                    help="time the declared configurations matching these selectors (comma-separated, each a "
                         "'+'-joined set of kernel-name substrings) on the swept rows that lack them, beside each "
                         "row's finalists (GPU; --rounds, default 5; --m keeps some M)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    path = Path(args.table)
    agent_eval._bootstrap()
    if args.redo and not args.refine:
        ap.error("--redo goes with --refine")
    if args.picks and not args.refine:
        ap.error("--picks goes with --refine")
    if args.picks and not Path(args.picks).is_file():
        ap.error(f"--picks {args.picks}: no such file")
    if args.refine:
        try:
            m_values = [int(x) for x in args.m.split(",") if x.strip()]
        except ValueError:
            ap.error(f"--m {args.m!r}: expected comma-separated integers")
        if args.graph and args.from_table:
            try:
                src = json.loads(Path(args.from_table).read_text())
                if not isinstance(src, dict) or not isinstance(src.get("shapes"), dict) or not src.get("kernel_configs"):
                    raise ValueError("not a sweep table with shapes and kernel_configs")
                table = graph_table(src, m_values, args.min_weight_mb)
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                ap.error(f"--from-table {args.from_table}: cannot make a graph-timed table of it ({exc})")
            if path.is_file():   # grow the graph table by the rows it lacks (its re-timed rows stay)
                try:
                    have = json.loads(path.read_text())
                    shapes_have = have["shapes"]
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    ap.error(f"--table {path}: not a readable sweep table ({type(exc).__name__}: {exc})")
                if have.get("timing") != "graph":
                    ap.error(f"--table {path}: not a graph-timed table (timing: graph); --from-table adds rows "
                             "only to one")
                if table_flavor(have) != table_flavor(table):
                    ap.error(f"--table {path} is {'_'.join(table_flavor(have))}, --from-table {args.from_table} "
                             f"{'_'.join(table_flavor(table))}: a graph table holds one flavor")
                from argus_cutlass.kernels.gemm.config import GemmConfig

                # compared as configurations: a table written before a field existed omits its default
                clash = [nm for nm, c in table["kernel_configs"].items()
                         if nm in have.get("kernel_configs", {}) and GemmConfig(**have["kernel_configs"][nm]) != GemmConfig(**c)]
                if clash:
                    ap.error(f"--from-table {args.from_table}: kernel names configured differently in --table "
                             f"{path}: {', '.join(clash[:3])}")
                new = {k: row for k, row in table["shapes"].items() if k not in shapes_have}
                shapes_have.update(new)
                have.setdefault("kernel_configs", {}).update(table["kernel_configs"])   # e.g. kernels declared since
                table = have
            else:
                new = table["shapes"]
            _save(path, table)
            print(f"{path}: {len(new)} rows of {args.from_table} added, to be timed from CUDA graphs")
        if not path.is_file():
            ap.error(f"--table {path}: no such file")
        args.rounds = args.rounds or 5
        return refine(path, json.loads(path.read_text()), args, t0)
    if args.graph:
        ap.error("--graph goes with --refine (a graph-timed table is made by --refine --graph and grown by it and by --extend)")
    try:
        is_graph = path.is_file() and json.loads(path.read_text()).get("timing") == "graph"
    except (OSError, ValueError, AttributeError) as exc:
        ap.error(f"--table {path}: not a readable sweep table ({type(exc).__name__}: {exc})")
    if is_graph and not (args.summary or args.merge_shipped or args.extend):
        ap.error(f"--table {path}: a graph-timed table is filled by --refine --graph and --extend only (the sweep "
                 "times per launch)")
    if args.extend:
        if not path.is_file():
            ap.error(f"--table {path}: no such file")
        table = json.loads(path.read_text())
        try:
            m_values = [int(x) for x in args.m.split(",") if x.strip()] or None
        except ValueError:
            ap.error(f"--m {args.m!r}: expected comma-separated integers")
        from argus_cutlass.generate import kernel_name
        space = {kernel_name(c): c for c in agent_eval.subspace(*table_flavor(table))}
        try:
            picked = agent_eval.select(list(space), args.extend)
        except ValueError as exc:
            ap.error(f"--extend {args.extend!r}: {exc}")
        args.rounds = args.rounds or 5
        return extend(path, table, {nm: space[nm] for nm in picked}, m_values, args, t0)
    args.rounds = args.rounds or 2
    if args.summary or args.merge_shipped:
        if not path.is_file():
            ap.error(f"--table {path}: no such file")
        table = json.loads(path.read_text())
        if args.merge_shipped:
            from argus_cutlass.agent.store import entry_identity, merge_entries
            from argus_cutlass.runtime.timing import DEFAULT_TIMING

            try:
                new = shape_entries(table)
            except ValueError as exc:
                ap.error(f"--table {path}: {exc}")
            shipped = ROOT / "agent" / "tuned_h200.json"
            doc = json.loads(shipped.read_text())
            if args.keep_existing:
                have = {entry_identity(e) for e in doc.get("entries", [])}
                kept = [e for e in new if entry_identity(e) in have]
                new = [e for e in new if entry_identity(e) not in have]
                print(f"kept {len(kept)} existing entries of the same shapes")
            # a graph-timed entry (the default timing) is not replaced by one timed per launch (the order of two
            # merges, per-launch table then graph table, must not decide which times ship)
            graph_held = {entry_identity(e) for e in doc.get("entries", []) if e.get("timing") == DEFAULT_TIMING}
            stale = [e for e in new if e.get("timing") != DEFAULT_TIMING and entry_identity(e) in graph_held]
            if stale:
                new = [e for e in new if not (e.get("timing") != DEFAULT_TIMING and entry_identity(e) in graph_held)]
                print(f"kept {len(stale)} graph-timed entries that this table times per launch")
            # one note per flavor: the bf16 -> bf16 tn table's under note_gemm_sweep (since session 21), each other
            # flavor's (issue 13 item 4) under note_gemm_sweep_<dtype>_<out_dtype>_<layout>
            fl = table_flavor(table)
            fl_name = "_".join(fl)
            note_key = "note_gemm_sweep" if fl_name == "bf16_bf16_tn" else f"note_gemm_sweep_{fl_name}"
            restricted = table.get("restricted")
            merged = merge_entries(doc, new)
            total = sum(1 for e in merged.get("entries", []) if e.get("kernel") == "gemm" and
                        (e.get("dtype"), e.get("out_dtype"), e.get("layout")) == fl)
            # the bf16 tn flavor's note keeps its hand-written history (sessions 21-23) ahead of the latest merge
            prefix = (doc[note_key].split(" || later: ")[0] + " || later: ") if (
                note_key in doc and fl_name == "bf16_bf16_tn") else ""
            merged[note_key] = prefix + (
                f"{total} GEMM entries in this flavor after merging {len(new)} on {time.strftime('%Y-%m-%d')} from "
                f"{path.name} by bench/sweep_gemm.py --merge-shipped{' --keep-existing' if args.keep_existing else ''}: "
                "per swept shape, the kernel the sweep measured fastest there (ms, cublas_ms: the sweep's); a lookup "
                "takes its bucket's entry measured nearest the problem"
                + (f"; swept over the configurations within {restricted['within']:.0%} of each shape's best in "
                   f"{Path(restricted['from']).name} (--from-table)" if restricted else "")
                + _extended_note(table) + _redo_note(table))
            shipped.write_text(json.dumps(merged, indent=1) + "\n")
            print(f"merged {len(new)} GEMM entries into {shipped}")
            return 0
        print(report(table))
        return 0
    out_dtype = args.out_dtype or args.dtype
    try:
        m_values = [int(x) for x in args.m.split(",") if x.strip()] or None
    except ValueError:
        ap.error(f"--m {args.m!r}: expected comma-separated integers")
    from argus_cutlass.errors import ArgusError

    try:
        shapes = shape_set(args.shapes, m_values, args.dtype, out_dtype, args.layout)
    except ArgusError as exc:
        ap.error(f"--shapes {args.shapes}: {exc}")
    skipped: dict[str, str] = {}
    for s in list(shapes):   # the direct TMA kernels only: a shape that needs staging is listed, not timed
        try:
            s.problem().validate()
        except ArgusError as exc:
            if not exc.rule.startswith("tma."):
                ap.error(f"--shapes {args.shapes}: {s.label}: {exc}")
            skipped[f"{s.m}x{s.n}x{s.k}"] = f"{exc.rule}: needs aligned staging (not swept)"
            shapes.remove(s)
    if skipped:
        print(f"{len(skipped)} shapes need aligned staging and are not swept (the table's 'skipped')", flush=True)
    flavor = {"dtype": args.dtype, "out_dtype": out_dtype, "layout": args.layout}
    ref = None
    if args.from_table:
        try:
            ref = json.loads(Path(args.from_table).read_text())
            if not ref.get("kernel_configs"):
                raise ValueError("it has no kernel_configs (written by bench/sweep_gemm.py since session 19)")
        except (OSError, ValueError) as exc:
            ap.error(f"--from-table {args.from_table}: {exc}")
    table = json.loads(path.read_text()) if path.is_file() else {}
    if table.get("restricted") and Path(table["restricted"]["from"]).name != Path(args.from_table).name:
        ap.error(f"--table {path} was swept over --from-table {table['restricted']['from']} (within "
                 f"{table['restricted']['within']}); pass the same --from-table to go on with it")
    if table and table.get("flavor", flavor) != flavor:
        ap.error(f"--table {path} holds {table.get('flavor')}, not {flavor}")
    table.setdefault("flavor", flavor)
    table.setdefault("shapes", {})
    table.setdefault("failures", [])
    table.setdefault("skipped", {}).update(skipped)
    table.setdefault("exclude", [])
    # smallest M first: a run cut by --max-seconds has covered whole token counts (decode, then the
    # wave-quantization range), and the costly M = 3000 / 8192 shapes come last
    todo = sorted((s for s in shapes if f"{s.m}x{s.n}x{s.k}" not in table["shapes"]), key=lambda s: (s.m, s.n, s.k))
    print(f"{len(shapes)} shapes, {len(shapes) - len(todo)} already in {path}, {len(todo)} to measure", flush=True)
    if not todo:
        print(report(table))
        return 0

    from argus_cutlass.kernels.gemm.heuristics import default_config
    from argus_cutlass.kernels.gemm.space import feasible
    from argus_cutlass.runtime.cuda import require_sm90

    try:
        info = require_sm90()
    except ArgusError as exc:
        print(f"sweep_gemm: needs a Hopper GPU: {exc}", file=sys.stderr)
        return 2
    table.setdefault("gpu", info.name)
    declared = agent_eval.subspace(args.dtype, out_dtype, args.layout)
    picks = {f"{s.m}x{s.n}x{s.k}": default_config(s.m, s.n, s.k, args.dtype, out_dtype, args.layout) for s in todo}
    from argus_cutlass.generate import kernel_name

    table["exclude"] = list(dict.fromkeys(table["exclude"] + [x for x in args.exclude.split(",") if x.strip()]))
    # --from-table: per shape, the reference row's finalists in this flavor (+ both untuned choices)
    per_shape: dict[str, list[Any]] = {}
    if ref is not None:
        from argus_cutlass.agent.costmodel import costmodel_choice

        for s in todo:
            key = f"{s.m}x{s.n}x{s.k}"
            sub = from_table_configs(ref, key, flavor, args.from_within, declared)
            if sub is not None:
                cm = costmodel_choice(s.m, s.n, s.k, args.dtype, out_dtype, args.layout)
                per_shape[key] = list(dict.fromkeys(sub + [picks[key]] + ([cm] if cm is not None else [])))
        whole = [s for s in todo if f"{s.m}x{s.n}x{s.k}" not in per_shape]
        table["restricted"] = {"from": args.from_table, "within": args.from_within}
        print(f"--from-table: {len(per_shape)} shapes restricted to the reference's finalists, {len(whole)} swept "
              f"whole", flush=True)
        wanted = (declared if whole else []) + list(picks.values()) + [c for v in per_shape.values() for c in v]
    else:
        wanted = declared + list(picks.values())
    configs = [c for c in dict.fromkeys(wanted) if not any(x in kernel_name(c) for x in table["exclude"])]
    verdicts = [(c, *feasible(c)) for c in configs]
    cands = [c for c, ok, _ in verdicts if ok]
    log = table["failures"]
    for c, ok, why in verdicts:
        if not ok and c.model_dump() not in [f.get("kernel") for f in log]:
            log.append({"kernel": c.model_dump(), "phase": "verify", "error": "; ".join(why)})
    print(f"{len(declared)} declared + {len(configs) - len(declared)} heuristic picks; "
          f"{len(configs) - len(cands)} refused by the verifier; building {len(cands)}", flush=True)
    notes: list[str] = []
    libs = agent_eval._build(cands, args.workers or 16, log, notes)
    name_of = {cfg: nm for nm, (cfg, _, _) in libs.items()}
    table.setdefault("kernel_configs", {}).update({nm: cfg.model_dump() for nm, (cfg, _, _) in libs.items()})
    _add_candidates(table, cands)
    print(f"{len(libs)} kernels passed the numerics check ({time.perf_counter() - t0:.0f} s)", flush=True)
    if not libs:   # nothing to time: record no shape (a resumed run would skip them), keep the failures
        _save(path, table)
        print("sweep_gemm: no kernel passed its build and check (the table's 'failures' say why); no shape "
              "recorded", file=sys.stderr)
        return 2
    done = 0
    for s in todo:
        if time.perf_counter() - t0 > args.max_seconds:
            print(f"stopping: {args.max_seconds:.0f} s spent; {len(todo) - done} shapes left for the next run")
            break
        key = f"{s.m}x{s.n}x{s.k}"
        t1 = time.perf_counter()
        shape_libs = libs
        if key in per_shape:
            mine = {name_of[c] for c in per_shape[key] if c in name_of}
            shape_libs = {nm: v for nm, v in libs.items() if nm in mine}
        try:
            row = measure_shape(shape_libs, s, args.warmup, args.iters, args.rounds, log)
        except Exception:  # noqa: BLE001 - a sticky CUDA error: the process is done; keep everything
            # the shape is recorded (so the next run does not start on it again) and the first kernel that
            # failed on it is excluded from the next runs' builds
            log.append({"phase": "fatal", "shape": key, "error": traceback.format_exc()[-2000:]})
            first = next((f["kernel"] for f in log if f.get("shape") in (key, s.label) and f.get("phase") == "time"),
                         None)
            if isinstance(first, str):
                table["exclude"].append(first)
            table["shapes"][key] = {"kernels": {}, "cublas_ms": None, "names": list(s.names),
                                    "error": f"fatal after kernel {first}" if first else "fatal"}
            _save(path, table)
            print(traceback.format_exc(), file=sys.stderr)
            break
        row["heuristic"] = name_of.get(picks[key])
        table["shapes"][key] = row
        _save(path, table)
        done += 1
        good = {nm: v for nm, v in row["kernels"].items() if v}
        best = min(good.values()) if good else float("nan")
        h = good.get(row["heuristic"])
        print(f"{key:>18} best {best:.4f} ms  heuristic {h if h is None else round(h, 4)}  cuBLAS "
              f"{row['cublas_ms'] and round(row['cublas_ms'], 4)}  ({time.perf_counter() - t1:.1f} s)", flush=True)
    _save(path, table)
    print(report(table))
    return 0


def _save(path: Path, table: dict) -> None:
    """Write ``table`` to ``path`` atomically (a killed run leaves the previous file whole), the failure
    log without repeated entries."""
    table["failures"] = list({json.dumps(f, sort_keys=True): f for f in table.get("failures", [])}.values())
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
