"""``FIELD=VALUE`` options of the bench scripts (``profile_gemm.py --also``, ``profile_moe.py --vary``): each value
typed and checked by the configuration model's own field declaration (pydantic), not by per-script conversions
(:mod:`argus_cutlass.kernels.fields`, which the CLI's ``--set`` uses too).
"""

from __future__ import annotations

from argus_cutlass.kernels.fields import assignments, field_value

__all__ = ["assignments", "field_value"]
