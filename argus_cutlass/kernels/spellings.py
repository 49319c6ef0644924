"""The spellings of element types and GEMM layouts that every input accepts, one place.

The command line (``--dtype``, ``--out-dtype``, ``--layout``) and the shape files of
``argus-cutlass tune --shapes`` (:mod:`argus_cutlass.agent.shapes`) read them through these two
functions, so a spelling one accepts the other accepts too. A known alias becomes its canonical
name; anything else passes through unchanged for the problem's own check (``problem.dtype``,
``problem.layout``), which names the supported values.

>>> normalize_dtype("BFloat16"), normalize_dtype(" half "), normalize_dtype("float32"), normalize_dtype("int8")
('bf16', 'fp16', 'fp32', 'int8')
>>> normalize_layout("TN"), normalize_layout(" nt ")
('tn', 'nt')
"""

from __future__ import annotations

#: spellings of the element types (case-insensitive, surrounding blanks ignored) -> the canonical name
DTYPE_ALIASES: dict[str, str] = {
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16", "torch.float16": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32", "torch.float32": "fp32",
}


def normalize_dtype(text: str) -> str:
    """A known element-type alias (``float16``, ``half``, ``bfloat16``, ``float32``, any case) -> its
    canonical name (``fp16``, ``bf16``, ``fp32``); anything else unchanged (the problem's
    ``problem.dtype`` rule names the supported types)."""
    return DTYPE_ALIASES.get(text.strip().lower(), text)


def normalize_layout(text: str) -> str:
    """BLAS layout letters in any case, surrounding blanks ignored (``TN`` = ``tn``); the problem's
    ``problem.layout`` rule refuses what is not one of tn, nt, nn, tt."""
    return text.strip().lower()
