"""The invariant catalogue, read from ``argus_cutlass.invariants/gemm.toml`` (data, not code)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Invariant:
    """One catalogue entry: id (``G1``), name, description, checking rules, whether the verifier
    checks it, the parts of it that are not modelled yet, and the source of the rule."""

    id: str
    name: str
    description: str
    rules: tuple[str, ...]
    checked: bool
    source: str
    unchecked: tuple[str, ...] = ()


@lru_cache(maxsize=None)
def load_invariants(kernel: str = "gemm") -> tuple[Invariant, ...]:
    """All invariants of ``invariants/<kernel>.toml``.

    Raises:
        FileNotFoundError: no catalogue for ``kernel``.
    """
    text = resources.files("argus_cutlass.invariants").joinpath(f"{kernel}.toml").read_text("utf-8")
    data = tomllib.loads(text)
    return tuple(
        Invariant(e["id"], e["name"], e["description"], tuple(e["rules"]), bool(e["checked"]), e["source"],
                  tuple(e.get("unchecked", ())))
        for e in data["invariant"]
    )


def invariant_of(rule: str, kernel: str = "gemm") -> str:
    """The id of the checked invariant that lists ``rule`` (``"?"`` if none does)."""
    for inv in load_invariants(kernel):
        if inv.checked and rule in inv.rules:
            return inv.id
    return "?"
