"""The GEMM kernel family, a peer of the others under :mod:`argus_cutlass.kernels`.

========================  ===================================================================
``config``                :class:`~.config.GemmConfig`, the frozen kernel configuration
``problem``               :class:`~.problem.GemmProblem` (sizes, layouts, TMA rules) and the C ABI
                          (entry signature, return codes)
``space``                 the typed search space (fragments from :mod:`argus_cutlass.plan.fragments`)
                          and the one feasibility function (the verifier)
``heuristics``            the fixed configuration heuristic and the shared-memory fit
``program``               ``build_program(config, problem) -> Program``: the kernel as one DSL program
``library``               :class:`~.library.GemmKernelLibrary`: a built ``.so`` through the C ABI
``check``                 the check/time harness (against ``reference``; numerics tolerances)
``reference``             the fp32 SIMT reference GEMM (``templates/reference_gemm.cu.j2``)
``baseline``              the vendor baseline: cuBLAS through torch
========================  ===================================================================

Its invariant catalogue is ``invariants/gemm.toml`` and its templates ``templates/gemm/``. The
orchestrator :mod:`argus_cutlass.generate` runs the family's stages.
"""
