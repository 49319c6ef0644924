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

__all__ = ["MOE_CATALOGUE_PATH", "MoEMutant", "base_layer", "load_moe_catalogue", "mutant_layer", "verify_moe_mutant"]

MOE_CATALOGUE_PATH = Path(__file__).with_name("mutants_moe.toml")


@dataclass(frozen=True)
class MoEMutant:
    id: str
    cls: str
    base: dict
    rule: str
    story: str
    edits: tuple[dict, ...]


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
            out[m["id"]] = MoEMutant(m["id"], m["class"], dict(base), m["rule"], m["story"], tuple(m["edit"]))
        except KeyError as exc:
            raise ConfigError("mutants.catalogue", f"MoE mutant {m.get('id')!r}: missing {exc}") from None
    return out


def base_layer(m: MoEMutant, tokens: int = 64) -> MoELayer:
    """The unedited layer of ``m``'s base problem (default configuration)."""
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.program import build_layer

    b = m.base
    return build_layer(MoEConfig(), MoEProblem(tokens, b["experts"], b["topk"], b["hidden"], b["ffn"]))


def _current(layer: MoELayer, part: str, kind: str | None, key: str | None, field: str) -> Any:
    if part in ("routing", "combine"):
        return getattr(getattr(layer, part), field)
    if part == "index":
        return getattr(layer.index(key), field)
    prog = layer.program(part)
    node = prog.resolve(f"{kind}[{key}]" if key else kind)
    return getattr(node, field)


def mutant_layer(m: MoEMutant) -> MoELayer:
    """The base layer with ``m``'s edits applied."""
    layer = base_layer(m)
    for e in m.edits:
        part, kind, key = e["part"], e.get("kind"), e.get("key")
        changes = {}
        for f, v in e["set"].items():
            if isinstance(v, dict) and "add" in v:
                v = _current(layer, part, kind, key, f) + int(v["add"])
            changes[f] = v
        if part in ("routing", "combine"):
            layer = layer.replace_node(part, **changes)
        elif part == "index":
            layer = layer.replace_node("index", None, key, **changes)
        else:
            layer = layer.replace_node(part, kind, key, **changes)
    return layer


def verify_moe_mutant(m: MoEMutant, *, smt: bool = True) -> Any:
    """The verifier's report on ``m``'s layer."""
    from argus_cutlass.verify.moe import verify_moe

    return verify_moe(mutant_layer(m), smt=smt)
