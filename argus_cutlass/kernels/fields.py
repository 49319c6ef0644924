"""Checks shared by the kernel configuration models (:class:`~argus_cutlass.kernels.gemm.config.GemmConfig`,
:class:`~argus_cutlass.kernels.attention.config.AttentionConfig`, :class:`~argus_cutlass.kernels.moe.config.MoEConfig`).
"""

from __future__ import annotations


def not_a_bool(value: object) -> object:
    """``value`` unchanged unless it is a bool: pydantic reads ``True`` as the int 1 (and JSON ``true`` with it),
    so ``{"tile_n": true}`` would build a 1-wide tile. Used as a ``mode="before"`` validator of every integer
    field (sizes, counts, stage depths).

    Raises:
        ValueError: ``value`` is ``True`` or ``False`` (pydantic reports it naming the field).

    >>> not_a_bool(128)
    128
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean, not an integer")
    return value
