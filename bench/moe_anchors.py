"""ANCHORS.md's "vLLM's Triton fused MoE" table (measured once on a lent H200, vLLM commit 13cb3e4), per bench cell
(model of ``MoEProblem.for_model``, T): the reference columns of ``bench/test_moe_bench.py`` and ``bench/moe_vllm.py``
(measured in another run: compare ratios, not times)."""

#: ANCHORS.md, vLLM Triton fused MoE (ms), for the ratio column only
VLLM_MS = {("mixtral", 16): 0.677, ("mixtral", 256): 0.771, ("mixtral", 2048): 2.762, ("mixtral", 8192): 9.581,
           ("qwen3-30b-a3b", 16): 0.216, ("qwen3-30b-a3b", 256): 0.351, ("qwen3-30b-a3b", 2048): 0.502,
           ("qwen3-30b-a3b", 8192): 1.424, ("deepseek-v2-lite", 16): 0.242, ("deepseek-v2-lite", 256): 0.318,
           ("deepseek-v2-lite", 2048): 0.577, ("deepseek-v2-lite", 8192): 1.888}
#: ANCHORS.md: _grouped_mm time / vLLM time (our speedup over _grouped_mm must exceed it in every cell)
VLLM_RATIO = {("mixtral", 16): 1.91, ("mixtral", 256): 1.73, ("mixtral", 2048): 1.27, ("mixtral", 8192): 1.13,
              ("qwen3-30b-a3b", 16): 2.17, ("qwen3-30b-a3b", 256): 2.24, ("qwen3-30b-a3b", 2048): 2.48,
              ("qwen3-30b-a3b", 8192): 2.27, ("deepseek-v2-lite", 16): 2.55, ("deepseek-v2-lite", 256): 2.11,
              ("deepseek-v2-lite", 2048): 1.83, ("deepseek-v2-lite", 8192): 1.66}
