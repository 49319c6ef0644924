"""The attention (FlashAttention forward) kernel family, a peer of GEMM under :mod:`argus_cutlass.kernels`.

========================  ===================================================================
``config``                :class:`~.config.AttentionConfig`, the frozen kernel configuration
``program``               ``build_program(config, problem) -> Program``: the kernel as one DSL program
========================  ===================================================================

Its invariant catalogue is ``invariants/attention.toml`` and its templates ``templates/attention/``.
"""
