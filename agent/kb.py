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
from pydantic import BaseModel, ConfigDict, Field, model_validator

from argus_cutlass.kernels.gemm.config import GemmConfig

_OPS = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
    "==": operator.eq, "!=": operator.ne, "in": lambda a, b: a in b,
}
_PROBLEM_VARS = ("m", "n", "k", "tiles_m", "tiles_n", "tiles", "waves")


class Precondition(BaseModel):
    """``var op value``, e.g. ``m <= 64``; ``var`` is a problem variable or a GemmConfig field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    var: str
    op: Literal["<=", "<", ">=", ">", "==", "!=", "in"]
    value: Any

    @model_validator(mode="after")
    def _known_var(self) -> Precondition:
        if self.var not in _PROBLEM_VARS and self.var not in GemmConfig.model_fields:
            raise ValueError(f"unknown precondition variable {self.var!r}; "
                             f"use one of {_PROBLEM_VARS} or a GemmConfig field")
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
    def _consistent(self) -> Technique:
        bad = [k for k in self.knobs if k not in GemmConfig.model_fields]
        if bad:
            raise ValueError(f"technique {self.id}: knobs {bad} are not GemmConfig fields")
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
    """Parse and validate ``argus_cutlass.agent/<name>``.

    Raises:
        pydantic.ValidationError: a row is malformed (unknown knob, precondition variable...).
    """
    text = resources.files("argus_cutlass.agent").joinpath(name).read_text("utf-8")
    rows = tomllib.loads(text)["technique"]
    techs = tuple(Technique(**r) for r in rows)
    ids = [t.id for t in techs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate technique ids in {name}")
    return KnowledgeBase(techs)


def problem_env(m: int, n: int, k: int, cfg: GemmConfig) -> dict[str, Any]:
    """Variables for preconditions: the problem, the incumbent's tile counts and its fields.

    ``tiles_m = ceil(M / tile_m)``, ``tiles_n = ceil(N / tile_n)``, ``tiles`` their product,
    ``waves = tiles / 132`` (fractional).
    """
    tm, tn = math.ceil(m / cfg.tile_m), math.ceil(n / cfg.tile_n)
    return {**cfg.model_dump(), "m": m, "n": n, "k": k, "tiles_m": tm, "tiles_n": tn,
            "tiles": tm * tn, "waves": tm * tn / SMS}
