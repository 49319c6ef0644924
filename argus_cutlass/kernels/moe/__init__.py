"""The mixture-of-experts (MoE) family with SwiGLU experts (issue 11): foundations only.

========================  ===================================================================
``problem``               :class:`~.problem.MoEProblem` (sizes, rules, flops, the weight-traffic
                          floor, router-output checks) and the ``ANCHORS.md`` model shapes
``routing``               :class:`~.routing.RoutingPlan` (counts, offsets, the permuted row map
                          and its inverse, the invariants with counterexamples, group tiles) and
                          :func:`~.routing.make_routing` (uniform, skewed, zero_experts,
                          all_to_one, explicit sizes)
``reference``             the float64 numpy and fp32 torch references of the layer
``baseline``              the torch baseline (sort + two ``torch._grouped_mm``)
========================  ===================================================================

Not built yet: the kernels (permute, gate+up grouped GEMM with SiLU * up fused, down grouped
GEMM, weighted combine), their DSL programs and templates, the verifier rules for the routing
invariants, and any check on a GPU.
"""
