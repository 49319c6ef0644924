"""The MoE planted-mistake suite (``mutants_moe.toml``): each mutant is an edit of the
:class:`~argus_cutlass.dsl.moe_ir.MoELayer` of a base problem (default :class:`MoEConfig`).

>>> cat = load_moe_catalogue()
>>> len(cat) >= 12 and mutant_layer(cat["combine_k_minus_1"]).combine.terms == 1
True
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from argus_cutlass.dsl.moe_ir import MoELayer
from argus_cutlass.errors import ConfigError

__all__ = ["GPU_PROBLEMS", "MOE_CATALOGUE_PATH", "GpuProblem", "MoEMutant", "base_layer", "gpu_problems_of",
           "int32_wrap_tokens", "load_moe_catalogue", "mutant_layer", "unverified_job", "verify_moe_mutant"]

MOE_CATALOGUE_PATH = Path(__file__).with_name("mutants_moe.toml")


@dataclass(frozen=True)
class MoEMutant:
    id: str
    cls: str
    base: dict
    rule: str
    story: str
    edits: tuple[dict, ...]
    gpu_base: dict | None = None        # the base its silicon run uses (None: ``base``)
    gpu_base_name: str = ""
    gpu_problems: tuple[str, ...] = ()  # extra silicon problems (keys of GPU_PROBLEMS)


@dataclass(frozen=True)
class GpuProblem:
    """One silicon problem of ``bench/mutants_moe_gpu.py``.

    ``tokens`` T; ``routing`` a :func:`~argus_cutlass.hw.routing.make_routing` kind with
    ``sizes``; ``sample`` None compares every token with the fp32 reference, else ``(head, tail)``:
    only the first ``head`` and the last ``tail`` tokens (the layer is token-wise independent; the
    large problems would need a multi-GB fp32 reference otherwise). ``invalid`` lists (token, slot)
    pairs whose id is set to -1 (padding the kernel must skip; a slot index ``-1`` means the last
    slot). ``cancel``: every expert gets expert 0's weights, x is scaled by ``CANCEL_X_SCALE`` and the
    top-k weights are +1/3, -1/3 per slot pair (0 for an odd last slot), so each token's exact output
    is 0: a correct fp32 combine of two identical expert outputs gives exactly 0, while a combine that
    rounds its running sum (to bf16) leaves about 2^-9 of |o| / 3, with |o| in the hundreds.
    ``why`` says which mistake it exposes.
    """

    base: str
    tokens: int
    routing: str = "uniform"
    sizes: tuple[int, ...] | None = None
    sample: tuple[int, int] | None = None
    invalid: tuple[tuple[int, int], ...] = ()
    cancel: bool = False
    #: the base's default problem: every mutant of the base runs on it (:func:`gpu_problems_of`)
    default: bool = False
    why: str = ""


#: x scale of a ``GpuProblem.cancel`` problem (expert outputs grow with its square through SwiGLU)
CANCEL_X_SCALE = 16.0


def int32_wrap_tokens(hidden: int, topk: int, index: str) -> int:
    """The smallest T for which index ``x_offset`` (``t * H``, t < T) or ``xs_offset`` (``row * H``,
    row < the padded rows >= T*k) passes ``2^31 - 1`` for every routing.

    >>> int32_wrap_tokens(4096, 1, "x_offset"), int32_wrap_tokens(4096, 8, "xs_offset")
    (524289, 65537)
    >>> int32_wrap_tokens(2048, 8, "x_offset")   # > 2^20: never reached by the proved range T <= 2^20
    1048577
    """
    limit = 2**31 // hidden            # the first row whose offset wraps
    if index == "x_offset":
        return limit + 1               # token t = T-1 >= limit
    if index == "xs_offset":
        return -(-(limit + 1) // topk)  # routed rows T*k >= limit + 1: the last real row >= limit
    raise KeyError(index)


#: T of the int32 wrap problem: 2^19 + 256 tokens at H = 4096, k = 1 (256 tokens and >= 256 permuted
#: rows past the wrap). Device memory: x and y 4.3 GB each, xs/out 4.3 GB, h 0.27 GB, weights 50 MB:
#: about 13 GB of the H200's 141 GB.
WRAP_TOKENS = 2**19 + 256

#: the silicon problems (name -> problem); the one marked ``default`` of a base (``<base>_uniform300``,
#: ``<base>_uniform100`` for the fused-routing bases) runs every mutant of that base
GPU_PROBLEMS: dict[str, GpuProblem] = {
    "small_uniform300": GpuProblem("small", 300, default=True, why="the default: uniform routing, 600 routed rows"),
    "qwen_uniform300": GpuProblem("qwen", 300, default=True, why="the default: uniform routing, 2400 routed rows"),
    "small64_uniform300": GpuProblem("small64", 300, default=True, why="the default of the small-T configuration"),
    "small_padded300": GpuProblem(
        "small", 300, invalid=((3, 0), (7, -1), (150, 0), (150, -1), (299, -1)),
        why="uniform routing with five -1 padding slots (token 150 has none valid): a skipped slot's row "
            "must stay -1 through the permuted row map and add nothing in the combine"),
    "small_cancel300": GpuProblem(
        "small", 300, cancel=True,
        why="identical experts, topk weights +1/3 and -1/3: the exact output is 0 and a correct fp32 combine "
            "gives exactly 0; a combine rounding its running sum to bf16 errs by ~2^-9 of |o| / 3"),
    "small64_many_units": GpuProblem(
        "small64", 4096, "skewed",
        why="8192 routed rows in 64-row tiles: ~130 m-tiles x 2 down n-blocks, more units than CTAs"),
    "small_aligned_groups": GpuProblem(
        "small", 300, "sizes", (128, 256, 0, 130, 65, 21, 0, 0),
        why="groups of exactly 128 and 256 rows (multiples of the 128-row padding): a rank shifted by one "
            "moves a group's last row onto the next group's first padded row, computed with the wrong expert"),
    "qwen_many_units": GpuProblem(
        "qwen", 2048, "skewed",
        why="2048 tokens x 8 slots, one hot expert: hundreds of m-tiles x 6 n-blocks = thousands of grouped "
            "units for 132 CTAs, so a wrong scheduler step skips units (the workspace is poisoned, so a "
            "skipped tile cannot inherit a correct h from an earlier run)"),
    "small_banded_uniform300": GpuProblem(
        "small_banded", 300, default=True, why="the banded default: 8 m-tiles in bands of 3 (3 + 3 + 2, a partial last band)"),
    "small_banded_skewed": GpuProblem(
        "small_banded", 1900, "skewed",
        why="3800 routed rows, one hot expert: 35 m-tiles under the runner's seed (bands 11 x 3 + 2), bands inside "
            "one expert and across experts, 140 gate+up units for 132 CTAs"),
    "small_banded_sizes": GpuProblem(
        "small_banded", 300, "sizes", (128, 256, 0, 130, 65, 21, 0, 0),
        why="three empty experts and groups of 128 / 256 / 130 rows: 7 m-tiles, bands 3 + 3 + 1"),
    "small64_handoff_uniform300": GpuProblem(
        "small64_handoff", 300, default=True, why="the handoff's default: 600 routed rows, 16 m-tiles of 64 rows, the down CTAs "
                                    "start while gate+up's last units still run"),
    "small64_handoff_many_units": GpuProblem(
        "small64_handoff", 4096, "skewed",
        why="8192 routed rows, one hot expert: ~130 m-tiles, more units than CTAs in both GEMMs, so down's producers "
            "reach m-tiles gate+up has not finished"),
    "small64_ch_uniform300": GpuProblem(
        "small64_ch", 300, default=True, why="the combine handoff's default: 600 routed rows, 16 m-tiles of 64 rows x 2 down "
                               "n-blocks, the combine CTAs start while down's last units still run"),
    "small64_ch_many_units": GpuProblem(
        "small64_ch", 4096, "skewed",
        why="8192 routed rows, one hot expert: ~130 m-tiles x 2 down n-blocks, more units than CTAs, so combine CTAs "
            "reach m-tiles down has not finished (and 4096 combine CTAs, most launched after down's end)"),
    "small_ch_uniform300": GpuProblem(
        "small_ch", 300, default=True, why="the combine handoff on the default 128-row tiles (no gate+up handoff): 600 routed rows, "
                             "8 m-tiles x 2 down n-blocks"),
    "small_sliced_uniform300": GpuProblem(
        "small_sliced", 300, default=True, why="the sliced gather's default: 600 routed rows (3 chunks) x 3 column slices of "
                                 "H = 256 (11 + 11 + 10 vectors)"),
    "small64_rb_uniform300": GpuProblem(
        "small64_rb", 300, default=True, why="the row-bounded default: 600 routed rows (~75 per expert: a full 64-row m-tile and a "
                               "partial one per group)"),
    "small64_rb_sizes": GpuProblem(
        "small64_rb", 300, "sizes", (64, 128, 0, 130, 65, 213, 0, 0),
        why="groups of exactly 64 and 128 rows (full m-tiles: tile_rows = 64, the box unshifted) beside 130 / 65 / "
            "213 rows (partial first m-tiles of 2, 1 and 21 rows: the padding before the routed rows) and two empty experts"),
    "small128_rb_uniform300": GpuProblem(
        "small128_rb", 300, default=True, why="row-bounded 128-row tiles: 600 routed rows, one partial m-tile per group"),
    # the dynamic walk (MoEConfig.dynamic_walk)
    "small64_dw_uniform300": GpuProblem(
        "small64_dw", 300, default=True, why="the dynamic walk's default: 600 routed rows, 16 m-tiles of 64 rows, both "
                               "handoffs; the runner poisons the workspace (0xFF), so a ticket counter not zeroed starts at -1"),
    "small64_dw_many_units": GpuProblem(
        "small64_dw", 4096, "skewed",
        why="8192 routed rows, one hot expert: ~130 m-tiles, more units than CTAs in both GEMMs, so CTAs take several "
            "tickets each and the down producers wait on gate+up m-tiles their tickets name"),
    # fused routing (session 42): T * k <= route_chunk (256) takes route_fused; T = 300 (600 rows) would not
    "small_fr_uniform100": GpuProblem(
        "small_fr", 100, default=True, why="one routing chunk (200 routed rows <= 256): the host launches route_fused"),
    "small_fr_two_chunks": GpuProblem(
        "small_fr", 129, why="258 routed rows: two chunks, just past what one chunk holds (the three kernels, unless "
                             "the dispatch wrongly takes route_fused: rows 256 and 257 unrouted)"),
    "small64_fr_g4_uniform100": GpuProblem(
        "small64_fr_g4", 100, default=True, why="one chunk, route_fused's grid 1 x 4 slices, 64-row tiles"),
    "small64_handoff_fr_uniform100": GpuProblem(
        "small64_handoff_fr", 100, default=True, why="one chunk with the gate+up -> down handoff: route_fused zeroes tile_ready"),
    "small_ch_fr_uniform100": GpuProblem(
        "small_ch_fr", 100, default=True, why="one chunk with the down -> combine handoff: route_fused zeroes out_ready"),
    "wide_int32_wrap": GpuProblem(
        "wide", WRAP_TOKENS, sample=(128, 512),
        why="T = 2^19 + 256 at H = 4096, k = 1: t * H and row * H pass 2^31 for the last >= 256 tokens / "
            "rows (int32_wrap_tokens: x_offset wraps from T = 524289, xs_offset from T*k = 524289)"),
}


def gpu_problems_of(m: MoEMutant) -> list[str]:
    """The silicon problems of ``m``: its base's default (the problem marked ``default``: uniform T = 300, T = 100 for
    the fused-routing bases, whose one-chunk path needs T * k <= 256; none when it runs on a ``gpu_base`` with no
    default) plus its own ``gpu_problems``."""
    base = m.gpu_base_name or _base_name(m)
    names = [n for n, g in GPU_PROBLEMS.items() if g.base == base and g.default][:1]
    return names + [p for p in m.gpu_problems if p not in names]


@lru_cache(maxsize=1)
def _catalogue_bases() -> dict:
    """The catalogue's ``[base.*]`` tables, read once."""
    return tomllib.loads(MOE_CATALOGUE_PATH.read_text()).get("base", {})


def _base_name(m: MoEMutant) -> str:
    for name, b in _catalogue_bases().items():
        if dict(b) == m.base:
            return name
    return ""


@lru_cache(maxsize=1)
def load_moe_catalogue(path: str | None = None) -> dict[str, MoEMutant]:
    """``{id: MoEMutant}`` of the catalogue.

    Raises:
        ConfigError: ``mutants.catalogue`` for a malformed entry (named).
    """
    data = tomllib.loads(Path(path or MOE_CATALOGUE_PATH).read_text())
    bases = data.get("base", {})
    out: dict[str, MoEMutant] = {}
    for m in data.get("mutant", []):
        try:
            base = bases[m["base"]] if isinstance(m["base"], str) else m["base"]
            gb = m.get("gpu_base")
            out[m["id"]] = MoEMutant(m["id"], m["class"], dict(base), m["rule"], m["story"], tuple(m["edit"]),
                                     dict(bases[gb]) if gb else None, gb or "",
                                     tuple(m.get("gpu_problems", ())))
        except KeyError as exc:
            raise ConfigError("mutants.catalogue", f"MoE mutant {m.get('id')!r}: missing {exc}") from None
    return out


def _base(m: MoEMutant, tokens: int = 64, *, gpu: bool = False) -> tuple[Any, Any]:
    """``(MoEConfig, MoEProblem)`` of ``m``'s base (``gpu``: its silicon base, ``gpu_base`` when set)."""
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem

    b = m.gpu_base if gpu and m.gpu_base else m.base
    return MoEConfig(**b.get("config", {})), MoEProblem(tokens, b["experts"], b["topk"], b["hidden"], b["ffn"])


def base_layer(m: MoEMutant, tokens: int = 64, *, gpu: bool = False) -> MoELayer:
    """The unedited layer of ``m``'s base problem (default configuration); ``gpu``: of its silicon
    base (``gpu_base`` when set)."""
    from argus_cutlass.kernels.moe.program import build_layer

    return build_layer(*_base(m, tokens, gpu=gpu))


def _current(layer: MoELayer, part: str, kind: str | None, key: str | None, field: str) -> Any:
    if part in ("routing", "combine"):
        return getattr(getattr(layer, part), field)
    if part == "workspace":
        return getattr(layer.workspace, field)
    if part == "layer":
        return getattr(layer, field)
    if part == "region":
        return getattr(layer.workspace.region(key), field)
    if part == "index":
        return getattr(layer.index(key), field)
    prog = layer.program(part)
    node = prog.resolve(f"{kind}[{key}]" if key else kind)
    return getattr(node, field)


def mutant_layer(m: MoEMutant, *, gpu: bool = False) -> MoELayer:
    """The base layer (``gpu``: the silicon base) with ``m``'s edits applied."""
    layer = base_layer(m, gpu=gpu)
    for e in m.edits:
        part, kind, key = e["part"], e.get("kind"), e.get("key")
        if "gemm" in e:
            # rebuild the grouped GEMM `part` from its GemmConfig with these fields changed (a layout,
            # swap-AB: edits of many nodes at once, as the GEMM program builder states them)
            layer = _rebuild_part(m, layer, part, e["gemm"], gpu=gpu)
            continue
        changes = {}
        for f, v in e.get("set", {}).items():
            if isinstance(v, dict) and "add" in v:
                v = _current(layer, part, kind, key, f) + int(v["add"])
            changes[f] = _tuples(v)
        if part in ("routing", "combine"):
            layer = layer.replace_node(part, **changes)
        elif part == "index":
            layer = layer.replace_node("index", None, key, **changes)
        else:
            layer = layer.replace_node(part, kind, key, **changes)
    return layer


def _tuples(v: Any) -> Any:
    """TOML lists (nested: a workspace region's count) as tuples, the nodes' field type."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _rebuild_part(m: MoEMutant, layer: MoELayer, part: str, gemm: dict, *, gpu: bool) -> MoELayer:
    """``layer`` with grouped GEMM ``part`` rebuilt by :func:`~argus_cutlass.kernels.moe.program.
    grouped_program` from the base configuration's GemmConfig with ``gemm``'s fields replaced."""
    import dataclasses

    from argus_cutlass.kernels.moe.program import gemm_configs, grouped_program

    cfg, problem = _base(m, gpu=gpu)
    gcfg = gemm_configs(cfg)[("gate_up", "down").index(part)].replace(**gemm)
    return dataclasses.replace(layer, **{part: grouped_program(cfg, problem, part, gcfg)})


def unverified_job(layer: MoELayer) -> Any:
    """The nvcc job (:class:`~argus_cutlass.build.nvcc.CompileJob`) of ``layer`` printed by the production template
    *without* the verifier: how a planted mistake reaches silicon (``bench/mutants_moe_gpu.py``, the GPU test of the
    handoff's time-out). Never the path of a user's kernel (that is :func:`argus_cutlass.generate.build_jobs`).

    Raises:
        ConfigError: ``render.program`` when the template cannot print ``layer``.
    """
    from argus_cutlass.build.nvcc import CompileJob
    from argus_cutlass.render.moe import render_moe

    return CompileJob.for_program(render_moe(layer), layer.kernel_name(), layer.fingerprint())


def verify_moe_mutant(m: MoEMutant, *, smt: bool = True) -> Any:
    """The verifier's report on ``m``'s layer."""
    from argus_cutlass.verify.moe import verify_moe

    return verify_moe(mutant_layer(m), smt=smt)
