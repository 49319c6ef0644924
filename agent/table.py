"""The tuned table, readable: list its entries and say why a problem would or would not use one.

``argus-cutlass table`` prints what :func:`argus_cutlass.generate.configure` consults, in its order:
the user's experience store (filled by ``tune``), then the shipped ``agent/tuned_h200.json``, then
the family's heuristic. An entry is used when its key equals the problem's key field by field

* GEMM: ``gpu | kernel | dtype | out_dtype | layout | bucket`` (bucket: M, N, K each rounded up to a
  power of two, :meth:`argus_cutlass.agent.planner.Problem.bucket`);
* attention: ``gpu | attention | dtype | d<head_dim> | causal/full | fixed/varlen | s<bucket>`` (bucket:
  the key length rounded up to a power of two, at least 128, :func:`argus_cutlass.agent.store.attention_key`);
* MoE: ``gpu | moe | dtype | e<E>k<k>h<H>i<I> | t<bucket>`` (bucket: T rounded up to a power of two,
  :func:`argus_cutlass.agent.store.moe_key`; shipped: 11 of the 12 MoE bench cells, ``note_moe``);

and its configuration passes the family's feasibility rules; an entry of another GPU of the same
architecture (an H200 entry on an H100, :func:`argus_cutlass.agent.store.gpu_arch`) is used when no
entry of the GPU itself is, and the choice's ``detail`` says so.

>>> rows = entries("gemm", store=ExperienceStore("/nonexistent/x.json"))
>>> rows[0]["source"], "m8192_n8192_k8192" in {r["key"]["bucket"] for r in rows}
('shipped', True)
"""

from __future__ import annotations

from typing import Any

from argus_cutlass.agent import store as _store
from argus_cutlass.runtime.timing import LEGACY_TIMING
from argus_cutlass.agent.store import (
    DEFAULT_GPU,
    KEY_FIELDS,
    ExperienceStore,
    attention_key,
    entry_distance,
    gpu_arch,
    gpu_name,
    key_rank,
    moe_key,
)

KERNELS = ("gemm", "attention", "moe")
#: the key fields of each family, in key order
GEMM_FIELDS = KEY_FIELDS["gemm"]
ATTENTION_FIELDS = KEY_FIELDS["attention"]
MOE_FIELDS = KEY_FIELDS["moe"]
#: the vendor baseline of each family: (its time's field in an entry, its name)
_VENDOR = {"gemm": ("cublas_ms", "cuBLAS"), "attention": ("cudnn_ms", "cuDNN"),
           "moe": ("grouped_mm_ms", "torch _grouped_mm")}


def _gemm_key(e: dict[str, Any]) -> dict[str, str]:
    return {f: str(e.get(f, "")) for f in GEMM_FIELDS}


def _attention_key_fields(key: str, fields: tuple[str, ...] = ATTENTION_FIELDS) -> dict[str, str]:
    parts = key.split("|")
    parts += [""] * (len(fields) - len(parts))
    return dict(zip(fields, parts))


def _config_text(kernel: str, cfg: dict[str, Any]) -> str:
    if kernel == "gemm":
        text = (f"{cfg.get('tile_m')}x{cfg.get('tile_n')}x{cfg.get('tile_k')} cluster {cfg.get('cluster_m')}x"
                f"{cfg.get('cluster_n')} {cfg.get('stages')} stages {cfg.get('schedule')}")
        scheduler = cfg.get("scheduler", "persistent")
        if scheduler != "persistent":   # split-K / cluster-K: how many ways the k loop is split
            text += (f" cluster-K {cfg.get('splits')} (a cluster of {cfg.get('splits')} CTAs splits K)"
                     if scheduler == "clusterk" else
                     f" {scheduler}" + (f" {cfg.get('splits')}" if scheduler == "splitk" else ""))
            text += " nondeterministic" if cfg.get("reduction") == "nondeterministic" else ""
        text += f" {cfg.get('acc_sets')} accumulator sets" if cfg.get("acc_sets", 1) != 1 else ""
        return text + (" swap-AB" if cfg.get("swap_ab") else "") + (" programmatic launch" if cfg.get("pdl") else "")
    if kernel == "moe":
        return (f"{cfg.get('tile_m')}-row tiles, gate+up {cfg.get('gu_tile_n')} x {cfg.get('gu_stages')} "
                f"stages, down {cfg.get('dn_tile_n')} x {cfg.get('dn_stages')} stages, k {cfg.get('tile_k')}")
    scheduler = cfg.get("scheduler") or ("dynamic" if cfg.get("causal") else "static")  # None: the mask's default
    text = (f"{cfg.get('tile_m')}x{cfg.get('tile_n')} {cfg.get('stages')} stages "
            f"{'ping-pong' if cfg.get('pingpong') else 'no turn order'} {scheduler} scheduler")
    if cfg.get("q_stages", 1) != 1:
        text += f" q_stages {cfg.get('q_stages')}"
    if cfg.get("epilogue", "direct") != "direct":
        text += f" epilogue {cfg.get('epilogue')}"
    return text + (" prefetch_q" if cfg.get("prefetch_q") else "")


def _row(kernel: str, source: str, e: dict[str, Any]) -> dict[str, Any]:
    vendor, vendor_name = _VENDOR[kernel]
    ms, vms = e.get("ms"), e.get(vendor)
    measured = (("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k") if kernel == "attention"
                else ("tokens",))
    row = {
        "source": source, "kernel": kernel,
        "key": (_gemm_key(e) if kernel == "gemm"
                else _attention_key_fields(e.get("key", ""), KEY_FIELDS[kernel])),
        "measured_on": (e.get("shape") if kernel == "gemm"
                        else {k: e.get("problem", {}).get(k) for k in measured}),
        "config": e.get("config", {}), "config_text": _config_text(kernel, e.get("config", {})),
        "ms": ms, "tflops": e.get("tflops"), "vendor": vendor_name, "vendor_ms": vms,
        "speedup": (vms / ms) if ms and vms else None,
        # how ms and the vendor's time were taken (GEMM; none recorded: one launch between events, before session 28)
        "timing": e.get("timing") or (LEGACY_TIMING if kernel == "gemm" else None),
    }
    return row


def entries(kernel: str | None = None, *, store: ExperienceStore | None = None) -> list[dict[str, Any]]:
    """Every tuned entry of ``kernel`` (all families when None): the store's first, then the shipped
    table's, each as a row (``source``, ``key`` fields, ``config``, ``ms``, vendor time, speedup)."""
    store = store or ExperienceStore()
    rows: list[dict[str, Any]] = []
    stored = list(store.read().get("entries", {}).values())
    for source, table in (("store", stored), ("shipped", _store.shipped_entries())):  # the lookups' table
        for e in table:
            k = e.get("kernel")
            if k in KERNELS and (kernel is None or k == kernel):
                rows.append(_row(k, source, e))
    return rows


def _family(problem: Any) -> str:
    from argus_cutlass.generate import family_of  # the orchestrator's one family rule

    return family_of(problem)


def _problem_key(problem: Any, gpu: str) -> dict[str, str]:
    if _family(problem) == "attention":
        return _attention_key_fields(attention_key(gpu, problem))
    if _family(problem) == "moe":
        return _attention_key_fields(moe_key(gpu, problem), MOE_FIELDS)
    from argus_cutlass.agent.planner import Problem

    p = Problem(problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype, problem.layout)
    return {"gpu": gpu, "kernel": "gemm", "dtype": p.dtype, "out_dtype": p.out_dtype, "layout": p.layout,
            "bucket": p.bucket()}


def explain(problem: Any, *, gpu: str | None = None, store: ExperienceStore | None = None) -> dict[str, Any]:
    """Why ``problem`` (a GemmProblem, AttentionProblem or MoEProblem) would or would not use a tuned entry.

    Returns:
        ``{"problem_key": {...}, "chosen": {"source", "config_text", "detail", "entry_key", "entry_shape"},
        "candidates": [...]}``: every entry of the family with ``missed`` (the key fields that differ,
        ``field: entry value != problem value``; a GPU of the same architecture is not a miss, ``same_arch``
        says so), nearest first; ``chosen`` is what :func:`argus_cutlass.generate.configure` returns, ``detail``
        its one-line reason (:attr:`argus_cutlass.agent.store.Lookup.detail`).
    """
    from argus_cutlass.generate import configure

    family = _family(problem)
    gpu = gpu or gpu_name() or DEFAULT_GPU
    store = store or ExperienceStore()
    want = _problem_key(problem, gpu)
    arch = gpu_arch(gpu)
    cands = []
    for row in entries(family, store=store):
        g = row["key"].get("gpu", "")
        same_arch = g != gpu and arch is not None and gpu_arch(g) == arch
        missed = [f"{f}: {row['key'].get(f, '')} != {v}" for f, v in want.items()
                  if row["key"].get(f, "") != v and not (f == "gpu" and same_arch)]
        cands.append({**row, "missed": missed, "same_arch": same_arch})
    def rank(row: dict[str, Any]) -> tuple[int, float]:  # the lookup's own "nearest" order (store.key_rank)
        return key_rank(list(want.values()), [str(row["key"].get(f, "")) for f in want],
                        row["same_arch"] or row["key"].get("gpu", "") == gpu)

    here = (problem.m, problem.n, problem.k) if family == "gemm" else None

    def measured_distance(row: dict[str, Any]) -> float:  # GEMM: nearest measured shape first, as the lookup
        return 0.0 if here is None else entry_distance({"shape": row.get("measured_on")}, here)

    cands.sort(key=lambda r: (*rank(r), r["same_arch"], measured_distance(r), r["source"] != "store"))
    for row in cands:
        row["config_normalized"] = _normalized(family, row["config"])
    looked = configure(problem, gpu=gpu, store=store)
    cfg = looked.config.model_dump()
    chosen = {"source": looked.source, "config": cfg, "config_text": _config_text(family, cfg),
              "detail": looked.detail, "entry_key": looked.entry_key,
              "entry_shape": list(looked.entry_shape) if looked.entry_shape else None}
    return {"family": family, "problem_key": want, "chosen": chosen, "candidates": cands}


def _normalized(family: str, cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The entry's configuration with the config class's defaults filled in (None: it no longer parses)."""
    try:
        if family == "gemm":
            from argus_cutlass.kernels.gemm.config import GemmConfig

            return GemmConfig(**cfg).model_dump()
        if family == "moe":
            from argus_cutlass.kernels.moe.config import MoEConfig

            return MoEConfig(**cfg).model_dump()
        from argus_cutlass.kernels.attention.config import AttentionConfig

        return AttentionConfig(**cfg).model_dump()
    except Exception:  # noqa: BLE001 - a stale entry: configure() skips it too
        return None


_SOURCE = {"store": "your experience store", "shipped": "the shipped H200 table",
           "heuristic": "the heuristic (no usable tuned entry)",
           "costmodel": "the cost model's first choice (no usable tuned entry)",
           "forced": "the heuristic (forced)"}


def format_entries(rows: list[dict[str, Any]], kernel: str | None) -> list[str]:
    """The text of ``argus-cutlass table`` without a problem: one line per entry."""
    lines: list[str] = []
    for fam in ((kernel,) if kernel else KERNELS):
        fam_rows = [r for r in rows if r["kernel"] == fam]
        if fam == "moe" and not fam_rows:
            lines.append("moe: no tuned entries (the layer's configuration is the heuristic "
                         "kernels.moe.heuristics.default_config: 64-row tiles for T <= 256 (small_t_config; 128-row "
                         "where an expert's group outgrows 64 rows, small_t_tile_m), 128-row tiles above; `argus-cutlass tune moe` records entries by power-of-two T bucket)")
            continue
        fields = KEY_FIELDS[fam]
        lines.append(f"{fam}: {len(fam_rows)} entries; key = {' | '.join(fields)} (used when every field "
                     "equals the problem's)")
        for r in fam_rows:
            key = " | ".join(r["key"][f] for f in fields[2:])
            perf = f"{r['ms']:.4f} ms" if r["ms"] else "-"
            if r["speedup"]:
                perf += f", {r['vendor']} {r['vendor_ms']:.4f} ms ({r['speedup']:.2f}x)"
            if r.get("timing") and r["ms"]:
                perf += f", {'from CUDA graphs' if r['timing'] == 'graph' else 'per launch'}"
            shape = r.get("measured_on") if fam == "gemm" else None   # a bucket holds several measured shapes
            at = f" (measured at {'x'.join(map(str, shape))})" if isinstance(shape, (list, tuple)) and shape else ""
            lines.append(f"  [{r['source']:<7}] {r['key']['gpu']} | {key}{at}: {r['config_text']}; {perf}")
    return lines


def format_explain(ex: dict[str, Any], limit: int = 3) -> list[str]:
    """The text of ``argus-cutlass table`` with a problem: its key, the choice, the nearest entries."""
    want = ex["problem_key"]
    lines = [f"problem key  {' | '.join(want.values())}"]
    c = ex["chosen"]
    lines.append(f"would use    {_SOURCE[c['source']]}: {c['config_text']}")
    if c.get("detail"):
        lines.append(f"why          {c['detail']}")
    exact = [r for r in ex["candidates"] if not r["missed"]]
    for r in exact:
        used = c["source"] == r["source"] and c["config"] == r["config_normalized"]
        if ex["family"] == "gemm" and c.get("entry_shape"):   # a bucket holds entries of several shapes
            entry_gpu = (c.get("entry_key") or "").partition("|")[0]
            used = used and r.get("measured_on") == c["entry_shape"] and r["key"].get("gpu") == entry_gpu
        other = f" of {r['key']['gpu']} (same architecture)" if r.get("same_arch") else ""
        shape = r.get("measured_on")
        at = f" measured at {'x'.join(str(x) for x in shape)}" if ex["family"] == "gemm" and isinstance(shape, list) else ""
        if used:
            why_not = ""
        elif ex["family"] == "gemm" and c.get("entry_shape") and c["source"] in ("store", "shipped"):
            taken = "x".join(str(x) for x in c["entry_shape"])
            why_not = f" (not used: the {c['source']} entry measured at {taken} was taken, the one measured nearest the problem)"
        else:
            why_not = (" (not used: an earlier source matched, or the family's feasibility rules refuse its "
                       "configuration)")
        lines.append(f"  matches [{r['source']}] entry{other}{at}: {r['config_text']}{why_not}")
    near = [r for r in ex["candidates"] if r["missed"]][:limit]
    if not exact:
        lines.append(f"no entry matches; the nearest {len(near)}:" if near else
                     f"no tuned {ex['family']} entries at all")
    for r in near:
        shape = r.get("measured_on")
        at = f" (measured at {'x'.join(str(x) for x in shape)})" if ex["family"] == "gemm" and isinstance(shape, list) else ""
        lines.append(f"  [{r['source']}] {' | '.join(r['key'].values())}{at}: missed {'; '.join(r['missed'])}")
    return lines
