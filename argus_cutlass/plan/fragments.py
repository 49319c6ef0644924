"""Typed search-space fragments (Helion ``config_fragment.py`` style), shared by every kernel family.

A fragment is one knob's domain: an ordered tuple of values with a default and a neighbour move
(one step along the domain order). Families build their spaces from these
(:mod:`argus_cutlass.kernels.gemm.space`); nothing here knows a family or the verifier.

>>> f = EnumFragment((64, 128, 256), 128)
>>> f.neighbours(128), f.neighbours(999)
([64, 256], [128])
>>> IntRangeFragment(2, 5, 4).domain()
(2, 3, 4, 5)
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any

__all__ = ["EnumFragment", "Fragment", "IntRangeFragment"]


class Fragment:
    """One knob's domain: :meth:`domain` (ordered values), ``default`` and neighbour moves."""

    default: Any

    def domain(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        return value in self.domain()

    def neighbours(self, value: Any) -> list[Any]:
        """Values one step away in the domain order (the local-search move); the default when
        ``value`` is outside the domain."""
        dom = self.domain()
        if value not in dom:
            return [self.default]
        i = dom.index(value)
        return [dom[j] for j in (i - 1, i + 1) if 0 <= j < len(dom)]

    def random(self, rng: Random) -> Any:
        return rng.choice(self.domain())


@dataclass(frozen=True)
class EnumFragment(Fragment):
    """A finite ordered set of values (power-of-two sizes, enums, pairs such as cluster shapes).

    Raises:
        ValueError: ``default`` is not one of ``values``.
    """

    values: tuple[Any, ...]
    default: Any

    def __post_init__(self) -> None:
        if self.default not in self.values:
            raise ValueError(f"default {self.default!r} not in {self.values!r}")

    def domain(self) -> tuple[Any, ...]:
        return self.values


@dataclass(frozen=True)
class IntRangeFragment(Fragment):
    """Integers ``lo..hi`` inclusive (e.g. pipeline stages).

    Raises:
        ValueError: ``default`` lies outside ``[lo, hi]``.
    """

    lo: int
    hi: int
    default: int

    def __post_init__(self) -> None:
        if not self.lo <= self.default <= self.hi:
            raise ValueError(f"default {self.default} not in [{self.lo}, {self.hi}]")

    def domain(self) -> tuple[int, ...]:
        return tuple(range(self.lo, self.hi + 1))
