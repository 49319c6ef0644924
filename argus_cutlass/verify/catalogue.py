"""The invariant catalogues, read from ``argus_cutlass.invariants/*.toml`` (data, not code).

Every family's catalogue (``gemm.toml``, ``common.toml``, ``attention.toml``...) is loaded, so a
rule checked by any module (the GEMM engine, the barrier and fragment checks) finds its invariant.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class Invariant:
    """One catalogue entry: id (``G1``), name, description, checking rules, whether the verifier
    checks it, the parts of it that are not modelled yet, the source of the rule, and the
    catalogue (family) it comes from."""

    id: str
    name: str
    description: str
    rules: tuple[str, ...]
    checked: bool
    source: str
    unchecked: tuple[str, ...] = ()
    family: str = "gemm"


def catalogue_names() -> tuple[str, ...]:
    """The families that have a catalogue (``invariants/<family>.toml``), sorted."""
    root = resources.files("argus_cutlass.invariants")
    return tuple(sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml")))


@cache
def load_invariants(kernel: str = "gemm") -> tuple[Invariant, ...]:
    """All invariants of ``invariants/<kernel>.toml``.

    Raises:
        FileNotFoundError: no catalogue for ``kernel``.
        ValueError: the file is not a valid catalogue (names the file and the entry).
    """
    text = resources.files("argus_cutlass.invariants").joinpath(f"{kernel}.toml").read_text("utf-8")
    try:
        data = tomllib.loads(text)
        return tuple(
            Invariant(e["id"], e["name"], e["description"], tuple(e["rules"]), bool(e["checked"]), e["source"],
                      tuple(e.get("unchecked", ())), kernel)
            for e in data.get("invariant", ())
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"invariants/{kernel}.toml is not a valid catalogue: {exc!r}") from None


@cache
def all_invariants() -> tuple[Invariant, ...]:
    """Every invariant of every catalogue (``gemm`` first, then the others by name)."""
    names = catalogue_names()
    order = (["gemm"] if "gemm" in names else []) + [n for n in names if n != "gemm"]
    return tuple(inv for n in order for inv in load_invariants(n))


def invariant_of(rule: str, kernel: str | None = None) -> str:
    """The id of the checked invariant that lists ``rule`` (``"?"`` if none does); ``kernel``
    restricts the search to one catalogue, ``None`` searches them all."""
    pool = load_invariants(kernel) if kernel is not None else all_invariants()
    for inv in pool:
        if inv.checked and rule in inv.rules:
            return inv.id
    return "?"
