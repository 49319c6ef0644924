"""The tuning agent (installed as ``argus_cutlass.agent``): knowledge base, planner, policies.

Modules: :mod:`.kb` (``knowledge.toml``), :mod:`.costmodel` (roofline + waves),
:mod:`.planner` (state/action/reward, the episode loop, default and random policies),
:mod:`.llm` (OpenAI-compatible policy), :mod:`.measure` (GPU and table evaluators),
:mod:`.store` (experience store, ``tuned_or_default``), :mod:`.tune` (``tune gemm``),
:mod:`.tune_many` (``tune --shapes`` / ``--model``: many shapes over CPU and GPU workers, resumable).
Nothing is imported here (no import side effects).
"""
