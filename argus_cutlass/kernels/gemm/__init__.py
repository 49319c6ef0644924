"""The GEMM kernel family: config, problem (with its C ABI), search space, heuristic, program
builder, reference and vendor baseline. Its invariant catalogue is ``invariants/gemm.toml`` and
its templates ``templates/gemm/``."""
