"""The tuned table, readable: list its entries and say why a problem would or would not use one.

``argus-cutlass table`` prints what :func:`argus_cutlass.generate.configure` consults, in its order:
the user's experience store (filled by ``tune``), then the shipped ``agent/tuned_h200.json``, then
the family's heuristic. An entry is used when its key equals the problem's key field by field

* GEMM: ``gpu | kernel | dtype | out_dtype | layout | bucket`` (bucket: M, N, K each rounded up to a
  power of two, :meth:`argus_cutlass.agent.planner.Problem.bucket`);
* attention: ``gpu | attention | dtype | d<head_dim> | causal/full | fixed/varlen | s<bucket>`` (bucket:
  the key length rounded up to a power of two, at least 128, :func:`argus_cutlass.agent.store.attention_key`);

and its configuration passes the family's feasibility rules. MoE has no tuned entries yet (its
configuration is :func:`argus_cutlass.kernels.moe.heuristics.default_config`).

>>> rows = entries("gemm", store=ExperienceStore("/nonexistent/x.json"))
>>> rows[0]["source"], rows[0]["key"]["bucket"]
('shipped', 'm8192_n8192_k8192')
"""

from __future__ import annotations

from typing import Any

from argus_cutlass.agent.store import (
    DEFAULT_GPU,
    ExperienceStore,
    attention_key,
    gpu_name,
    shipped_entries,
)

KERNELS = ("gemm", "attention", "moe")
#: the key fields of each family, in key order
GEMM_FIELDS = ("gpu", "kernel", "dtype", "out_dtype", "layout", "bucket")
ATTENTION_FIELDS = ("gpu", "kernel", "dtype", "head_dim", "mask", "lengths", "bucket")


def _gemm_key(e: dict[str, Any]) -> dict[str, str]:
    return {f: str(e.get(f, "")) for f in GEMM_FIELDS}


def _attention_key_fields(key: str) -> dict[str, str]:
    parts = key.split("|")
    parts += [""] * (len(ATTENTION_FIELDS) - len(parts))
    return dict(zip(ATTENTION_FIELDS, parts))


def _config_text(kernel: str, cfg: dict[str, Any]) -> str:
    if kernel == "gemm":
        text = (f"{cfg.get('tile_m')}x{cfg.get('tile_n')}x{cfg.get('tile_k')} cluster {cfg.get('cluster_m')}x"
                f"{cfg.get('cluster_n')} {cfg.get('stages')} stages {cfg.get('schedule')}")
        if cfg.get("scheduler", "persistent") != "persistent":
            text += f" {cfg.get('scheduler')}"
        return text + (" swap-AB" if cfg.get("swap_ab") else "")
    scheduler = cfg.get("scheduler") or ("dynamic" if cfg.get("causal") else "static")  # None: the mask's default
    text = (f"{cfg.get('tile_m')}x{cfg.get('tile_n')} {cfg.get('stages')} stages "
            f"{'ping-pong' if cfg.get('pingpong') else 'no turn order'} {scheduler} scheduler")
    if cfg.get("q_stages", 1) != 1:
        text += f" q_stages {cfg.get('q_stages')}"
    if cfg.get("epilogue", "direct") != "direct":
        text += f" epilogue {cfg.get('epilogue')}"
    return text + (" prefetch_q" if cfg.get("prefetch_q") else "")


def _row(kernel: str, source: str, e: dict[str, Any]) -> dict[str, Any]:
    vendor = "cublas_ms" if kernel == "gemm" else "cudnn_ms"
    ms, vms = e.get("ms"), e.get(vendor)
    row = {
        "source": source, "kernel": kernel,
        "key": _gemm_key(e) if kernel == "gemm" else _attention_key_fields(e.get("key", "")),
        "measured_on": e.get("shape") if kernel == "gemm" else {
            k: e.get("problem", {}).get(k) for k in ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k")},
        "config": e.get("config", {}), "config_text": _config_text(kernel, e.get("config", {})),
        "ms": ms, "tflops": e.get("tflops"), "vendor": "cuBLAS" if kernel == "gemm" else "cuDNN", "vendor_ms": vms,
        "speedup": (vms / ms) if ms and vms else None,
    }
    return row


def entries(kernel: str | None = None, *, store: ExperienceStore | None = None) -> list[dict[str, Any]]:
    """Every tuned entry of ``kernel`` (all families when None): the store's first, then the shipped
    table's, each as a row (``source``, ``key`` fields, ``config``, ``ms``, vendor time, speedup)."""
    store = store or ExperienceStore()
    rows: list[dict[str, Any]] = []
    stored = list(store.read().get("entries", {}).values())
    for source, table in (("store", stored), ("shipped", shipped_entries())):
        for e in table:
            k = e.get("kernel")
            if k in ("gemm", "attention") and (kernel is None or k == kernel):
                rows.append(_row(k, source, e))
    return rows


def _problem_key(problem: Any, gpu: str) -> dict[str, str]:
    if hasattr(problem, "head_dim"):
        return _attention_key_fields(attention_key(gpu, problem))
    from argus_cutlass.agent.planner import Problem

    p = Problem(problem.m, problem.n, problem.k, problem.dtype, problem.out_dtype, problem.layout)
    return {"gpu": gpu, "kernel": "gemm", "dtype": p.dtype, "out_dtype": p.out_dtype, "layout": p.layout,
            "bucket": p.bucket()}


def explain(problem: Any, *, gpu: str | None = None, store: ExperienceStore | None = None) -> dict[str, Any]:
    """Why ``problem`` (a GemmProblem or AttentionProblem) would or would not use a tuned entry.

    Returns:
        ``{"problem_key": {...}, "chosen": {"source", "config_text"}, "candidates": [...]}``: every entry
        of the family with ``missed`` (the key fields that differ, ``field: entry value != problem
        value``), nearest first; ``chosen`` is what :func:`argus_cutlass.generate.configure` returns.
    """
    from argus_cutlass.generate import configure

    family = "attention" if hasattr(problem, "head_dim") else "gemm"
    gpu = gpu or gpu_name() or DEFAULT_GPU
    store = store or ExperienceStore()
    want = _problem_key(problem, gpu)
    cands = []
    for row in entries(family, store=store):
        missed = [f"{f}: {row['key'].get(f, '')} != {v}" for f, v in want.items() if row["key"].get(f, "") != v]
        cands.append({**row, "missed": missed})
    cands.sort(key=lambda r: (len(r["missed"]), r["source"] != "store"))
    for row in cands:
        row["config_normalized"] = _normalized(family, row["config"])
    cfg, source = configure(problem, gpu=gpu, store=store)
    chosen = {"source": source, "config": cfg.model_dump(), "config_text": _config_text(family, cfg.model_dump())}
    return {"family": family, "problem_key": want, "chosen": chosen, "candidates": cands}


def _normalized(family: str, cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The entry's configuration with the config class's defaults filled in (None: it no longer parses)."""
    try:
        if family == "gemm":
            from argus_cutlass.kernels.gemm.config import GemmConfig

            return GemmConfig(**cfg).model_dump()
        from argus_cutlass.kernels.attention.config import AttentionConfig

        return AttentionConfig(**cfg).model_dump()
    except Exception:  # noqa: BLE001 - a stale entry: configure() skips it too
        return None


_SOURCE = {"store": "your experience store", "shipped": "the shipped H200 table",
           "heuristic": "the heuristic (no usable tuned entry)"}


def format_entries(rows: list[dict[str, Any]], kernel: str | None) -> list[str]:
    """The text of ``argus-cutlass table`` without a problem: one line per entry."""
    lines: list[str] = []
    for fam in ((kernel,) if kernel else KERNELS):
        fam_rows = [r for r in rows if r["kernel"] == fam]
        if fam == "moe":
            lines.append("moe: no tuned entries (the layer's configuration is the heuristic "
                         "kernels.moe.heuristics.default_config: 64-row tiles for T <= 256 (small_t_config), "
                         "128-row tiles above)")
            continue
        fields = GEMM_FIELDS if fam == "gemm" else ATTENTION_FIELDS
        lines.append(f"{fam}: {len(fam_rows)} entries; key = {' | '.join(fields)} (used when every field "
                     "equals the problem's)")
        for r in fam_rows:
            key = " | ".join(r["key"][f] for f in fields[2:])
            perf = f"{r['ms']:.4f} ms" if r["ms"] else "-"
            if r["speedup"]:
                perf += f", {r['vendor']} {r['vendor_ms']:.4f} ms ({r['speedup']:.2f}x)"
            lines.append(f"  [{r['source']:<7}] {r['key']['gpu']} | {key}: {r['config_text']}; {perf}")
    return lines


def format_explain(ex: dict[str, Any], limit: int = 3) -> list[str]:
    """The text of ``argus-cutlass table`` with a problem: its key, the choice, the nearest entries."""
    want = ex["problem_key"]
    lines = [f"problem key  {' | '.join(want.values())}"]
    c = ex["chosen"]
    lines.append(f"would use    {_SOURCE[c['source']]}: {c['config_text']}")
    exact = [r for r in ex["candidates"] if not r["missed"]]
    for r in exact:
        used = c["source"] == r["source"] and c["config"] == r["config_normalized"]
        lines.append(f"  matches [{r['source']}] entry: {r['config_text']}"
                     + ("" if used else " (not used: an earlier source matched, or the family's feasibility "
                                        "rules refuse its configuration)"))
    near = [r for r in ex["candidates"] if r["missed"]][:limit]
    if not exact:
        lines.append(f"no entry matches; the nearest {len(near)}:" if near else
                     f"no tuned {ex['family']} entries at all")
    for r in near:
        lines.append(f"  [{r['source']}] {' | '.join(r['key'].values())}: missed {'; '.join(r['missed'])}")
    return lines
