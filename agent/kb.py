"""The knowledge base of Hopper GEMM techniques (``agent/knowledge.toml``, data not code).

Each :class:`Technique` names the GemmConfig fields it changes (``knobs``), its
preconditions on the problem and the incumbent (``requires``), its expected effect, the
invariants / verifier rules it puts at risk and its source. Unavailable techniques
(``available = false``) are kept for the LLM's context and the report, never proposed.

>>> kb = load_knowledge()
>>> len(kb.techniques) >= 15
True
>>> kb.get("register_reallocation").available, kb.get("swap_ab").available
(False, True)
>>> "stages" in kb.get("pipeline_depth").knobs
True

A file may name its kernel family at the top (``family = "attention"``; default ``gemm``): the
knobs and precondition variables are then checked against that family's config
(:data:`FAMILIES`). ``agent/knowledge_attention.toml`` holds the attention techniques:

>>> akb = load_knowledge("knowledge_attention.toml")
>>> akb.family, akb.get("cluster_2x1").available, akb.get("cluster_2x1").missing_knobs
('attention', False, ('cluster',))

``agent/knowledge_moe.toml`` holds the MoE techniques (family ``moe``, checked against MoEConfig;
precondition variables from :func:`moe_env`):

>>> mkb = load_knowledge("knowledge_moe.toml")
>>> mkb.family, mkb.get("band_walk").available, mkb.get("swap_ab").available, mkb.get("swap_ab").missing_knobs
('moe', True, False, ('swap_ab',))
"""

from __future__ import annotations

import math
import operator
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from argus_cutlass.agent.costmodel import SMS  # for the ``waves`` precondition variable
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.space import bucket_of

_OPS = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
    "==": operator.eq, "!=": operator.ne, "in": lambda a, b: a in b,
}
_PROBLEM_VARS = ("m", "n", "k", "tiles_m", "tiles_n", "tiles", "waves")
#: precondition variables of attention problems (:func:`attention_env`)
_ATTENTION_VARS = ("head_dim", "causal", "varlen", "seqlen_q", "seqlen_k", "tiles", "waves")
#: precondition variables of MoE problems (:func:`moe_env`)
_MOE_VARS = ("tokens", "experts", "topk", "hidden", "ffn", "routed_rows", "rows_per_expert",
             "small_t", "bucket", "m_tile_ratio", "padding_128")
#: family -> (its config model, its problem variables); the validation context's ``family``
#: (default ``gemm``) picks the row
FAMILIES: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {
    "gemm": (GemmConfig, _PROBLEM_VARS),
    "attention": (AttentionConfig, _ATTENTION_VARS),
    "moe": (MoEConfig, _MOE_VARS),
}


def _family(info: ValidationInfo | None) -> tuple[str, type[BaseModel], tuple[str, ...]]:
    ctx = info.context if info is not None and isinstance(info.context, dict) else {}
    name = ctx.get("family", "gemm")
    if name not in FAMILIES:
        raise ValueError(f"unknown kernel family {name!r}; known: {sorted(FAMILIES)}")
    return (name, *FAMILIES[name])


class Precondition(BaseModel):
    """``var op value``, e.g. ``m <= 64``; ``var`` is a problem variable or a field of the family's config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    var: str
    op: Literal["<=", "<", ">=", ">", "==", "!=", "in"]
    value: Any

    @model_validator(mode="after")
    def _known_var(self, info: ValidationInfo) -> Precondition:
        _, config, variables = _family(info)
        if self.var not in variables and self.var not in config.model_fields:
            raise ValueError(f"unknown precondition variable {self.var!r}; "
                             f"use one of {variables} or a {config.__name__} field")
        return self

    def holds(self, env: dict[str, Any]) -> bool:
        return bool(_OPS[self.op](env[self.var], self.value))

    def text(self) -> str:
        return f"{self.var} {self.op} {self.value}"


class Technique(BaseModel):
    """One optimization technique (a row of ``knowledge.toml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    knobs: tuple[str, ...]
    missing_knobs: tuple[str, ...] = ()
    available: bool = True
    why: str = ""
    requires: tuple[Precondition, ...] = ()
    effect: str
    risks: tuple[str, ...] = Field(min_length=1)
    source: str

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Technique:
        _, config, _ = _family(info)
        bad = [k for k in self.knobs if k not in config.model_fields]
        if bad:
            raise ValueError(f"technique {self.id}: knobs {bad} are not {config.__name__} fields")
        if self.available and not self.knobs:
            raise ValueError(f"technique {self.id}: an available technique needs knobs")
        if not self.available and not (self.why and self.missing_knobs):
            raise ValueError(f"technique {self.id}: unavailable needs `why` and `missing_knobs`")
        return self

    def applicable(self, env: dict[str, Any]) -> bool:
        """Available and every precondition holds in ``env`` (see :func:`problem_env`)."""
        return self.available and all(p.holds(env) for p in self.requires)


@dataclass(frozen=True)
class KnowledgeBase:
    techniques: tuple[Technique, ...]
    #: the kernel family the knobs belong to (:data:`FAMILIES`)
    family: str = "gemm"

    def get(self, tid: str) -> Technique:
        """The technique ``tid``; KeyError naming the known ids otherwise."""
        for t in self.techniques:
            if t.id == tid:
                return t
        raise KeyError(f"unknown technique {tid!r}; known: {[t.id for t in self.techniques]}")

    @property
    def available(self) -> tuple[Technique, ...]:
        return tuple(t for t in self.techniques if t.available)

    def applicable(self, env: dict[str, Any]) -> tuple[Technique, ...]:
        return tuple(t for t in self.techniques if t.applicable(env))

    def as_prompt(self) -> list[dict[str, Any]]:
        """Compact JSON-ready rows for an LLM prompt."""
        return [
            {"id": t.id, "knobs": list(t.knobs), "available": t.available,
             **({"why_unavailable": t.why} if not t.available else {}),
             "requires": [p.text() for p in t.requires], "effect": t.effect,
             "risks": list(t.risks), "source": t.source}
            for t in self.techniques
        ]


@lru_cache(maxsize=4)
def load_knowledge(name: str = "knowledge.toml") -> KnowledgeBase:
    """Parse and validate ``argus_cutlass.agent/<name>`` (its top-level ``family``, default ``gemm``,
    names the config whose fields the knobs are).

    Raises:
        pydantic.ValidationError: a row is malformed (unknown knob, precondition variable...).
    """
    text = resources.files("argus_cutlass.agent").joinpath(name).read_text("utf-8")
    data = tomllib.loads(text)
    family = data.get("family", "gemm")
    if family not in FAMILIES:
        raise ValueError(f"{name}: unknown family {family!r}; known: {sorted(FAMILIES)}")
    techs = tuple(Technique.model_validate(r, context={"family": family}) for r in data["technique"])
    ids = [t.id for t in techs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate technique ids in {name}")
    return KnowledgeBase(techs, family)


def problem_env(m: int, n: int, k: int, cfg: GemmConfig) -> dict[str, Any]:
    """Variables for preconditions: the problem, the incumbent's tile counts and its fields.

    ``tiles_m = ceil(M / tile_m)``, ``tiles_n = ceil(N / tile_n)``, ``tiles`` their product,
    ``waves = tiles / 132`` (fractional).
    """
    tm, tn = math.ceil(m / cfg.tile_m), math.ceil(n / cfg.tile_n)
    return {**cfg.model_dump(), "m": m, "n": n, "k": k, "tiles_m": tm, "tiles_n": tn,
            "tiles": tm * tn, "waves": tm * tn / SMS}


def attention_env(problem: Any, cfg: AttentionConfig) -> dict[str, Any]:
    """Precondition variables of an attention problem and the incumbent ``cfg``: its fields, the
    problem's ``head_dim``, ``causal``, ``varlen``, ``seqlen_q``, ``seqlen_k`` (the maxima with
    varlen), ``tiles = heads x sum over the batch of ceil(Lq / tile_m)`` and ``waves = tiles / 132``."""
    tiles = problem.heads * sum(math.ceil(lq / cfg.tile_m) for lq, _ in problem.lengths())
    return {**cfg.model_dump(), "head_dim": problem.head_dim, "causal": bool(problem.causal),
            "varlen": bool(problem.varlen), "seqlen_q": problem.seqlen_q, "seqlen_k": problem.seqlen_k,
            "tiles": tiles, "waves": tiles / SMS}


def moe_env(problem: Any, cfg: MoEConfig) -> dict[str, Any]:
    """Precondition variables of an MoE problem (:class:`~argus_cutlass.kernels.moe.problem.MoEProblem`)
    and the incumbent ``cfg``: its fields, the problem's ``tokens`` (T), ``experts`` (E), ``topk`` (k),
    ``hidden`` (H), ``ffn`` (I), ``routed_rows = T * k``, ``rows_per_expert = T * k / E`` (fractional:
    the rows of an expert's group at uniform routing), ``bucket`` (``small`` / ``large``,
    :data:`~argus_cutlass.kernels.moe.space.T_BUCKETS`), ``small_t`` (``bucket == "small"``,
    i.e. T <= 256) and ``m_tile_ratio``: the expected 64-row m-tiles per expert over the 128-row ones at
    the T bucket (:func:`~argus_cutlass.kernels.moe.heuristics.expected_m_tiles`, the weight passes; the
    heuristic takes 128-row small-T tiles from ``heuristics.SPILL_RATIO`` = 1.25 on) and ``padding_128``: the
    128-row m-tiles' expected padded rows over the routed rows at the T bucket
    (:func:`~argus_cutlass.kernels.moe.heuristics.expected_padding`; the heuristic takes the dynamic walk and
    row-bounded tiles above the small-T bucket from ``heuristics.SHORT_GROUP_PADDING`` = 0.3 on)."""
    from argus_cutlass.kernels.moe.heuristics import expected_m_tiles, expected_padding

    bucket = bucket_of(problem.tokens)
    routed = problem.tokens * problem.topk
    m128 = expected_m_tiles(problem, 128)
    return {**cfg.model_dump(), "tokens": problem.tokens, "experts": problem.experts,
            "topk": problem.topk, "hidden": problem.hidden, "ffn": problem.ffn, "routed_rows": routed,
            "rows_per_expert": routed / problem.experts, "small_t": bucket == "small", "bucket": bucket,
            "m_tile_ratio": expected_m_tiles(problem, 64) / m128 if m128 else 1.0,
            "padding_128": expected_padding(problem, 128)}
