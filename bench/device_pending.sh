#!/bin/bash
# Device steps (written in session 16, extended in 17): correctness, mutants and benchmarks, one
# step per device call (each fits the 600 s limit of a lent H200 call):
#
#   bash bench/device_pending.sh OUTDIR attn-quad16   # quad16 epilogue correctness (GPU tests, ~4 min)
#   bash bench/device_pending.sh OUTDIR attn-mutants16 # the 6 output16_* mutants of the quad16 store map (~2 min)
#   bash bench/device_pending.sh OUTDIR gemm-gpu [K]  # the GEMM GPU tests (tests/gpu/test_gemm.py), pytest -k K if given
#   bash bench/device_pending.sh OUTDIR gemm-staged   # the aligned staging path (M=300 col-major A, N=33, K=33, ...)
#   bash bench/device_pending.sh OUTDIR gemm-pdl [SHAPES] # issue 13 item 2: decode rows' best kernel with and without
#                                                     # the launch node pdl, per launch and from graphs (~1 min a shape)
#   bash bench/device_pending.sh OUTDIR gemm-cv-confirm [M_VALUES] # issue 13 item 1: the held-out choices re-timed
#                                                     # beside each row's finalists in one process, then scored
#                                                     # (resumable; e.g. 1,8,32,64 then 100,256,512 then 1024,3000: each
#                                                     # call compiles only its rows' kernels)
#   bash bench/device_pending.sh OUTDIR fuzz [FAMILY] # seeded random GEMM / MoE / attention problems through the API's
#                                                     # own kernel choice vs fp32 (tests/gpu/test_fuzz_gpu.py; FAMILY
#                                                     # gemm, moe or attention: pytest -k; ARGUS_FUZZ_SEED: the seed)
#   bash bench/device_pending.sh OUTDIR sanitize      # bench/sanitize_gpu.py: edge problems of the three families under compute-sanitizer memcheck + synccheck (~3 min)
#   bash bench/device_pending.sh OUTDIR torch-ops     # argus_cutlass.torch ops on silicon (GPU tests)
#   bash bench/device_pending.sh OUTDIR moe [K]       # MoE GPU tests (pytest -k K: that selection only) incl. small-T, banded walks, sliced gather, the handoff (~7 min)
#   bash bench/device_pending.sh OUTDIR moe-profile   # per-kernel times (banded, unbanded) + ncu of small/large T (~8 min)
#   bash bench/device_pending.sh OUTDIR moe-gather    # route_permute with gather_unroll 1 vs 4, every bench cell (~5 min)
#   bash bench/device_pending.sh OUTDIR moe-lookahead # grouped GEMMs with work_lookahead 0 vs 1, per kernel, 8 cells (~4 min)
#   bash bench/device_pending.sh OUTDIR moe-pdl       # the layer with pdl off / on / on + 8 k-tiles prefetched, per
#                                                     # kernel and end to end, 8 cells
#   bash bench/device_pending.sh OUTDIR moe-cli [T]   # the main command `argus-cutlass moe` on the 3 ANCHORS shapes at T
#                                                     # (default 16): heuristic / shipped config, fp32 check, time vs torch
#   bash bench/device_pending.sh OUTDIR moe-mutants [IDS]  # the MoE mutants without the verifier (all of
#                                                     # testing/mutants_moe.toml, ~4 min per 40; IDS: comma-separated,
#                                                     # e.g. the 8 combine_handoff_* of session 42)
#   bash bench/device_pending.sh OUTDIR moe-handoff [K]  # tests/gpu/test_moe_handoff_gpu.py alone (pytest -k K: e.g.
#                                                     # combine_handoff: the down -> combine handoff bitwise against
#                                                     # the layer without it, session 42)
#   bash bench/device_pending.sh OUTDIR moe-unitk     # small-T GEMM throughput vs unit length and expert count: T=16,
#                                                     # one configuration rule (heuristic), E x k x H x I varied (~4 min)
#   bash bench/device_pending.sh OUTDIR moe-source    # ncu PC sampling of the Qwen3 / Mixtral T=16 gate+up GEMMs: the
#                                                     # hottest SASS lines (bench/ncu_source_top.py), ~3 min
#   bash bench/device_pending.sh OUTDIR moe-balance   # ncu per-SM active cycles (min/avg/max) of the small-T GEMMs: load imbalance?
#   bash bench/device_pending.sh OUTDIR moe-flush     # the small-T layers with L2 flushed by writing vs reading 256 MB (~4 min)
#   bash bench/device_pending.sh OUTDIR moe-narrow    # small-T GEMMs with 64 / 128 / 256-column n-tiles x stages (profile_moe --vary), ~8 min
#   bash bench/device_pending.sh OUTDIR moe-tilek256  # small-T layers with 256-deep k-tiles (512-byte row segments) vs 64 / 128 (~8 min)
#   bash bench/device_pending.sh OUTDIR moe-ceilings  # bench/moe_ceilings.py: the small-T layers with the routing / combine
#                                                     # launches left out, then with the m-tiles' padding traffic left out (~2 min)
#   bash bench/device_pending.sh OUTDIR moe-dram-bytes # ncu DRAM bytes read / written per kernel of the small-T layers (~1 min)
#   bash bench/device_pending.sh OUTDIR moe-fused [K]  # the fused single-chunk routing's GPU module (pytest -k K)
#   bash bench/device_pending.sh OUTDIR moe-dynamic [K] # the dynamic (atomic-ticket) walk's GPU module: bitwise vs the
#                                                     # static walk, edge routings, T = 16 / 256 / 2048, back to back (pytest -k K)
#   bash bench/device_pending.sh OUTDIR moe-rb-ncu [CELLS] # ncu of row_bounded off / on (default Mixtral T=256, the 128-row
#                                                     # cell session 41 measured 18.6 % slower row-bounded): time, DRAM / L2
#                                                     # bytes, TMA-unit and L2 throughput per kernel (~3 min)
#   bash bench/device_pending.sh OUTDIR moe-ab [FIELD=V1,V2] [CELLS] # bench/moe_ab.py: the shipped / heuristic layers with
#                                                     # one MoEConfig field varied, checked, interleaved (default
#                                                     # row_bounded=false,true on the 6 small-T cells; ~3 min), e.g.
#                                                     # moe-ab combine_handoff=false,true qwen3-30b-a3b:16,deepseek-v2-lite:16,qwen3-30b-a3b:256
#   bash bench/device_pending.sh OUTDIR moe-variants "-;F=V;F=V,G=W" [CELLS] # bench/moe_ab.py --variants: several
#                                                     # fields per variant, the first ("-": as picked) the reference
#   bash bench/device_pending.sh OUTDIR moe-vllm [CELLS [CALLS [heuristic]]] # bench/moe_vllm.py: our layer, vLLM's Triton fused MoE and
#                                                     # _grouped_mm interleaved in one process, all fp32-checked (default
#                                                     # the 12 bench cells; ~6-9 min on a cold machine: split CELLS over
#                                                     # two calls if it nears the limit). vLLM's code is the git-ignored
#                                                     # .baselines/vllm_moe: name it in the run tool's carry list
#                                                     # (CALLS: ours and vLLM timed from CUDA graphs of CALLS calls;
#                                                     # a 5th argument "heuristic": ours as the heuristic picks it)
#   bash bench/device_pending.sh OUTDIR moe-accept [CELLS] # moe-vllm per call, then from graphs of 8 calls, one device
#                                                     # call (issue 11's acceptance beside vLLM; carry .baselines/vllm_moe)
#   bash bench/device_pending.sh OUTDIR moe-stalls    # ncu warp-state / scheduler / source counters of the small-T
#                                                     # GEMMs, Qwen3 T=16 (78-82% of HBM) beside Mixtral T=16 (94-98%)
#   bash bench/device_pending.sh OUTDIR moe-bench     # MoE vs _grouped_mm; also 128-row and unbanded layers (~7 min)
#   bash bench/device_pending.sh OUTDIR moe-bench lookahead  # the same, interleaved with the other work_lookahead
#   bash bench/device_pending.sh OUTDIR moe-bench pdl        # the same, interleaved with pdl flipped
#   bash bench/device_pending.sh OUTDIR moe-bench pdlw8      # ... with pdl + an 8-k-tile weight prefetch flipped
#   bash bench/device_pending.sh OUTDIR moe-bench evict      # ... with the weights loaded evict-first flipped
#   bash bench/device_pending.sh OUTDIR moe-bench handoff    # ... with the gate+up -> down handoff flipped
#   bash bench/device_pending.sh OUTDIR moe-tune [BUDGET [CELLS]]  # tune moe on the bench cells (6 candidates
#                                                     # each; CELLS e.g. mixtral:256,qwen3-30b-a3b:16) -> tuned_moe.json
#   bash bench/device_pending.sh OUTDIR mutants18     # the GEMM and attention mutants added in session 18 (red team), ~4 min
#   bash bench/device_pending.sh OUTDIR attn-tune 512   # direct vs quad16 x q_stages x prefetch, S = 512
#   bash bench/device_pending.sh OUTDIR attn-tune 2048  # the same at S = 2048 (each ~60 kernels, ~6 min)
#   bash bench/device_pending.sh OUTDIR attn-epilogue # the shipped entry, direct vs quad16 epilogue, whole grid
#   bash bench/device_pending.sh OUTDIR attn-bench    # the ANCHORS attention grid vs cuDNN (~3 min)
#   bash bench/device_pending.sh OUTDIR gemm-bench [costmodel|tuned|heuristic]  # the ANCHORS GEMM shapes vs cuBLAS
#   bash bench/device_pending.sh OUTDIR gemm-decode-ncu  # ncu of the shipped decode kernels, ~100 MB vs 940 MB weights
#   bash bench/device_pending.sh OUTDIR gemm-splitk   # decode K splits (128x16: none / 2 / 4 / stream-K) timed, ncu cycles and wait sites (~5 min)
#   bash bench/device_pending.sh OUTDIR gemm-deep     # decode: 64-row swap-AB tiles at 12 vs 22 stages (bytes in flight) on few-tile shapes (~6 min)
#   bash bench/device_pending.sh OUTDIR gemm-k128     # decode: the swap-AB tiles with 128-deep k-tiles and / or 2-4 accumulator sets vs the declared (~6 min)
#   bash bench/device_pending.sh OUTDIR gemm-k128b    # decode misses: the declared 128-deep kernels deeper / with 4 sets /
#                                                     # split with 128-deep k-tiles / nondeterministic reduction, on
#                                                     # the 8 worst decode rows (~8 min)
#   bash bench/device_pending.sh OUTDIR gemm-k256     # decode misses: the declared k-128 swap-AB kernels copied at k 256 (512-byte weight row segments), ~8 min
#   bash bench/device_pending.sh OUTDIR read-floor    # decode: a plain streaming-read kernel on each weight size > L2 (the
#                                                     # attainable floor, launch included) beside the sweep's best (~2 min)
#   bash bench/device_pending.sh OUTDIR decode-graph  # decode: the read kernels and the sweep's best GEMM vs cuBLAS on 12
#                                                     # decode rows, per launch and replayed from a CUDA graph (~7 min)
#   bash bench/device_pending.sh OUTDIR gemm-graph [bf16_bf16_tn [M,M,...]]  # the per-call host cost, then the decode rows
#                                                     # (weights >= 60 MiB) re-timed from CUDA graphs, cuBLAS too, into
#                                                     # OUTDIR/sweep/gemm_sweep_<flavor>_graph_h200.json (resumable; the
#                                                     # committed table grows by the rows it lacks: e.g.
#                                                     # ARGUS_MIN_WEIGHT_MB=0 ... gemm-graph bf16_bf16_tn 1,8,32,64,100,256)
#   bash bench/device_pending.sh OUTDIR gemm-small    # small GEMMs cuBLAS wins from graphs: K split 8 / 16 copies (~8 min)
#   bash bench/device_pending.sh OUTDIR gemm-small-ncu  # the same small GEMMs under ncu: GPU duration of ours vs cuBLAS
#   bash bench/device_pending.sh OUTDIR gemm-mid-ncu [MxNxK ...]  # ncu sections (speed of light, memory, warp states)
#                                                     # of the table's best beside cuBLAS on the worst mid-size rows
#   bash bench/device_pending.sh OUTDIR gemm-pipes [MxNxK [SELECTOR]]  # ncu instruction / pipe / warp-state / scheduler
#                                                     # sections (--print-details all) of one kernel (+ tile_k 128) beside cuBLAS
#   bash bench/device_pending.sh OUTDIR gemm-sass [MxNxK [SELECTOR]]  # per-SASS-instruction warp stall samples and
#                                                     # executed counts of one kernel and cuBLAS (ncu source page, CSV)
#   bash bench/device_pending.sh OUTDIR gemm-kscale   # 8x8xK, K 512..32768 under ncu: fixed cost vs cost per k-block
#   bash bench/device_pending.sh OUTDIR gemm-clusterk # cluster-K (DSMEM split-K): GPU tests, then the small GEMMs from graphs
#   bash bench/device_pending.sh OUTDIR gemm-clusterk-wide  # cluster-K on 128x64 / 128x128 tiles, mid-size rows (~6 min)
#   bash bench/device_pending.sh OUTDIR mutants-clusterk  # the 6 cluster-K mutants built without the verifier, run (~2 min)
#   bash bench/device_pending.sh OUTDIR clusterk-product  # the main job on shapes where it now picks cluster-K
#   bash bench/device_pending.sh OUTDIR explore-tiles PLAN  # bench/explore_tiles.py on a plan (bench/plans/*.json): copies
#                                                     # outside the declared sub-space, one build, timed from graphs
#   bash bench/device_pending.sh OUTDIR cublas-kernels [BELOW]  # the kernels cuBLAS runs (names: tile, cluster, split) on
#                                                     # the graph table's rows where cuBLAS / ours < BELOW (0.95), ~1 min
#   bash bench/device_pending.sh OUTDIR graph-product # the product's --timing graph: runtime GPU tests + the main job both ways
#   bash bench/device_pending.sh OUTDIR compile-latency  # cold nvcc build per family (fresh cache) + in-process hit
#   bash bench/device_pending.sh OUTDIR gemm-swap     # swap-AB GPU cases incl. the decode K splits (stream-K, split-K)
#   bash bench/device_pending.sh OUTDIR gemm-sweep [bf16_bf16_tn [M,M,...]]  # issue 13's sweep (bench/sweep_gemm.py):
#                                                     # the declared sub-space x the model shape set vs cuBLAS; resumes
#                                                     # from bench/data/gemm_sweep_<flavor>_h200.json, writes
#                                                     # OUTDIR/sweep/ (commit it back there before the next call)
#   ARGUS_SWEEP_SHAPES=random:40:1 ARGUS_SWEEP_TAG=calib bash bench/device_pending.sh OUTDIR gemm-sweep
#                                                     # the same on a calibration set apart from the model shapes
#   ARGUS_SWEEP_FROM=bench/data/gemm_sweep_bf16_bf16_tn_h200.json bash bench/device_pending.sh OUTDIR gemm-sweep fp16_fp16_tn
#                                                     # another flavor over the bf16 tn sweep's per-shape finalists
#   ARGUS_EXTEND=SELECTORS bash bench/device_pending.sh OUTDIR gemm-extend [bf16_bf16_tn [M,M,...]]
#                                                     # configurations added to the declared sub-space (once
#                                                     # declared_subspace holds them), timed on the
#                                                     # swept rows that lack them beside each row's finalists
#                                                     # (bench/sweep_gemm.py --extend), writes OUTDIR/sweep/;
#                                                     # ARGUS_SWEEP_TAG=graph: the graph-timed table, from CUDA graphs
#   bash bench/device_pending.sh OUTDIR gemm-refine [bf16_bf16_tn]  # re-time each swept shape's finalists (within
#                                                     # 10 % of its best + the untuned choices; 5 rounds, ~25 ms of
#                                                     # launches each), resumable like gemm-sweep, writes OUTDIR/sweep/
#   ARGUS_SWEEP_TAG=graph ARGUS_REDO=s33 ARGUS_REFINE_WITHIN=0.05 bash bench/device_pending.sh OUTDIR gemm-refine bf16_bf16_tn 1,8
#                                                     # after a template change: the graph table's rows at those M
#                                                     # re-timed (finalists within 5 %), each marked redo: s33
#
# Wheels in .whl/ (pydantic, z3-solver, nvidia-cutlass: the device has no package index) are carried with
# carry [".whl"]; the z3 wheel slimmed first (python3 bench/slim_z3_wheel.py .whl/z3_solver-*.whl: 29 -> 9.7 MB),
# else the tree (~28.5 MB) and the wheels break the run tool's 64 MiB carry limit. They are
# installed to /tmp/site with the package; runs from /tmp so the installed copy is imported.
set -o pipefail
R=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: bench/device_pending.sh OUTDIR STEP}
STEP=${2:?usage: bench/device_pending.sh OUTDIR STEP}
# the steps are this script's own case labels (one list: a step added below is known here)
grep -qE "^  ([a-z0-9-]+\|)*${STEP//[^A-Za-z0-9-]/_}(\|[a-z0-9-]+)*\)" "$0" || { echo "unknown step $STEP (see the header of this script)"; exit 2; }
mkdir -p "$OUT"
if ls "$R"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/.whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
  python3 -m pip install -q --upgrade --no-deps --no-build-isolation --no-index --target /tmp/site "$R" >"$OUT/install.log" 2>&1 \
    || { tail "$OUT/install.log"; exit 1; }
fi
export PYTHONUNBUFFERED=1
# clocks, power and throttle reasons beside each benchmark (a machine per call: session 22 saw the same
# 8192^3 kernel 7 % slower than in session 16 with cuBLAS not, and nothing recorded to tell why)
# (sampled every 2 s while the step runs, into $OUT/gpu_state.csv)
# pytest-xdist's "-n N" (empty without xdist): workers by GPU memory, at most 8 -- 8 workers on an 80 GB H100 ran out
# of memory (session 45: 28 OOM); one process peaks at ~24 GB (the anchor shapes' fp32 draws + the allocator cache),
# so ~28 GB each; ARGUS_XDIST overrides
xdist_args() {
  python3 -c "import xdist" 2>/dev/null || return 0
  local gb nw
  gb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  [[ "$gb" =~ ^[0-9]+$ ]] || gb=80000   # "[N/A]" or no device: assume an 80 GB card
  nw=$(( gb / 28000 )); [ "$nw" -gt 8 ] && nw=8; [ "$nw" -lt 1 ] && nw=1
  echo "-n ${ARGUS_XDIST:-$nw}"
}

# bench/moe_vllm.py into DIR/moe_vllm.{md,log}: DIR, time limit (s), cells ("" = its default 12), graph calls ("" =
# per call), "heuristic" or "", lines of output shown (the moe-vllm and moe-accept steps)
moe_vllm_run() {
  mkdir -p "$1"
  timeout "$2" python3 "$R/bench/moe_vllm.py" --vllm-dir "$R/.baselines/vllm_moe" ${3:+--cells "$3"} ${4:+--graph "$4"} \
    $( [ "$5" = heuristic ] && echo --heuristic ) --out "$1/moe_vllm.md" 2>&1 | tee "$1/moe_vllm.log" \
    | grep -v "^generated" | tail -"$6"
}

gpu_state() {
  nvidia-smi --query-gpu=timestamp,name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -l 2 >> "$OUT/gpu_state.csv" 2>&1 &
  GPU_STATE_PID=$!
  trap 'kill $GPU_STATE_PID 2>/dev/null' EXIT
}
cd /tmp
PYT="python3 -m pytest -q -p no:cacheprovider --timeout=${ARGUS_TEST_TIMEOUT:-540} --timeout-method=thread"
case "$STEP" in
  attn-quad16)
    $PYT -m gpu "$R/tests/gpu/test_attention_gpu.py" -k "quad16 or fully_masked" -rf 2>&1 | tee "$OUT/attn_quad16.log" | tail -30 ;;
  moe)
    # one test first, in one process: the module's fixture compiles every layer in one parallel nvcc batch
    # (on a cold machine each xdist worker would otherwise start the same batch); then the rest under xdist
    $PYT -m gpu "$R/tests/gpu/test_moe_gpu.py" -k test_small_t_heuristic_picks_the_small_path 2>&1 \
      | tee "$OUT/moe_gpu_prebuild.log" | tail -3
    XD=$(xdist_args)
    $PYT $XD -m gpu "$R/tests/gpu/test_moe_gpu.py" ${3:+-k "$3"} -rf --durations=8 2>&1 | tee "$OUT/moe_gpu_tests.log" | tail -30
    [ -n "$3" ] && exit 0   # a -k selection: the handoff module is not part of it
    # the gate+up -> down handoff (its own module: one prebuild batch)
    $PYT -m gpu "$R/tests/gpu/test_moe_handoff_gpu.py" -rf 2>&1 | tee "$OUT/moe_handoff_gpu_tests.log" | tail -5 ;;
  moe-fused)
    # session 42: the fused single-chunk routing (tests/gpu/test_moe_fused_routing_gpu.py: fused vs the three routing
    # kernels bitwise, the many-chunk fallback, back-to-back calls alternating one-chunk and many-chunk T)
    $PYT -m gpu "$R/tests/gpu/test_moe_fused_routing_gpu.py" ${3:+-k "$3"} -rf --durations=8 2>&1 \
      | tee "$OUT/moe_fused_gpu_tests.log" | tail -20 ;;
  moe-dynamic)
    # session 43: the dynamic walk (tests/gpu/test_moe_dynamic_walk_gpu.py: dynamic_walk on vs off bitwise, edge
    # routings at T = 16, 256, 2048, back-to-back calls on one workspace)
    $PYT -m gpu "$R/tests/gpu/test_moe_dynamic_walk_gpu.py" ${3:+-k "$3"} -rf --durations=8 2>&1 \
      | tee "$OUT/moe_dynamic_gpu_tests.log" | tail -20 ;;
  moe-handoff)
    # session 42: the handoff GPU module alone (its fixture builds every layer of the module in one nvcc batch)
    $PYT -m gpu "$R/tests/gpu/test_moe_handoff_gpu.py" ${3:+-k "$3"} -rf --durations=8 2>&1 \
      | tee "$OUT/moe_handoff_gpu_tests.log" | tail -20 ;;
  attn-mutants16)
    timeout 500 python3 "$R/bench/mutants_attention_gpu.py" --out "$OUT" --timeout 10 --ids \
      output16_shuffle_same_bit,output16_shuffle_xor3,output16_single_stage,output16_lane_cols4,output16_group_cols16,output16_rows_unmasked \
      2>&1 | tee "$OUT/attn_mutants16.log" | tail -25 ;;
  gemm-gpu)
    # no xdist: the file's session fixture builds every kernel (build_many, 16 cores) in each worker
    $PYT -m gpu "$R/tests/gpu/test_gemm.py" ${3:+-k "$3"} -rf --durations=8 2>&1 | tee "$OUT/gemm_gpu_tests.log" | tail -30 ;;
  gemm-staged)
    $PYT -m gpu "$R/tests/gpu/test_gemm_staged.py" -rf 2>&1 | tee "$OUT/gemm_staged_gpu.log" | tail -30 ;;
  sanitize)
    # session 36: bench/sanitize_gpu.py built and checked without the sanitizer, then memcheck (every case) and
    # synccheck under compute-sanitizer; torch's caching allocator off so an access past a tensor leaves its
    # allocation. racecheck / initcheck misread TMA and mbarrier kernels (cuBLAS's too): not in this step
    timeout 200 python3 "$R/bench/sanitize_gpu.py" --build > "$OUT/sanitize_build.log" 2>&1; tail -3 "$OUT/sanitize_build.log"
    export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    for tool in memcheck synccheck; do
      timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 30 python3 "$R/bench/sanitize_gpu.py" \
        > "$OUT/sanitize_$tool.log" 2>&1; echo "$tool rc=$?"; grep -E "^case .*(FAIL|ERROR)|SUMMARY" "$OUT/sanitize_$tool.log"
    done ;;
  fuzz)
    # no -x, no xdist: the module fixture builds every selected case's kernel in one parallel batch (api.precompile,
    # 16 cores), then every case runs; -rA lists each case (its id carries the seed) with its outcome
    $PYT -m gpu "$R/tests/gpu/test_fuzz_gpu.py" ${3:+-k "$3"} -rA --durations=10 2>&1 \
      | tee "$OUT/fuzz_$(echo "${3:-all}" | tr -c 'A-Za-z0-9_\n' _).log" | tail -80 ;;
  torch-ops)
    # pytest-xdist (when its wheel is carried): the tests' kernels compile in parallel
    XD=$(xdist_args)
    $PYT $XD -m gpu "$R/tests/gpu/test_torch_ops_gpu.py" -rf --durations=8 2>&1 | tee "$OUT/torch_ops_gpu.log" | tail -30 ;;
  moe-profile)
    timeout 200 python3 "$R/bench/profile_moe.py" --out "$OUT/prof" 2>&1 | tee "$OUT/moe_profile.log" | tail -40
    timeout 150 python3 "$R/bench/profile_moe.py" --out "$OUT/prof_unbanded" --unbanded --cells mixtral:8192,qwen3-30b-a3b:2048 \
      2>&1 | tee "$OUT/moe_profile_unbanded.log" | tail -20
    timeout 200 ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      python3 "$R/bench/profile_moe.py" --out "$OUT/prof" --ncu --cells qwen3-30b-a3b:16,mixtral:8192 > "$OUT/moe_ncu.txt" 2>&1
    grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|L2 Cache Throughput" "$OUT/moe_ncu.txt" | head -60 ;;
  moe-gather)
    # the permute gather unrolled (gather_unroll 4) beside the shipped loop (1), per kernel, every bench cell
    timeout 540 python3 "$R/bench/profile_moe.py" --out "$OUT/gather" --unroll 1,4 --cells \
      mixtral:16,mixtral:256,mixtral:2048,mixtral:8192,qwen3-30b-a3b:16,qwen3-30b-a3b:256,qwen3-30b-a3b:2048,qwen3-30b-a3b:8192,deepseek-v2-lite:16,deepseek-v2-lite:256,deepseek-v2-lite:2048,deepseek-v2-lite:8192 \
      2>&1 | tee "$OUT/moe_gather.log" | grep -E "^==|route_permute|gemm_kernel|combine" | head -80 ;;
  moe-lookahead|moe-pdl)
    # the grouped GEMMs' work lookahead (1) beside the shipped loop (0), or programmatic dependent launch on / off,
    # per kernel and end to end, the small-T cells and two large
    KNOB=${STEP#moe-}
    VALUES=0,1; [ "$KNOB" = pdl ] && VALUES=0,1,8
    timeout 540 python3 "$R/bench/profile_moe.py" --out "$OUT/$KNOB" --$KNOB $VALUES --cells \
      mixtral:16,mixtral:256,qwen3-30b-a3b:16,qwen3-30b-a3b:256,deepseek-v2-lite:16,deepseek-v2-lite:256,qwen3-30b-a3b:2048,deepseek-v2-lite:2048 \
      2>&1 | tee "$OUT/moe_$KNOB.log" | grep -E "^==|gemm_kernel" | head -80 ;;
  moe-unitk)
    # session 23: the many-expert small-T GEMMs stream at 82-85 % of 4.3 TB/s, Mixtral's at 93-95 %; the
    # expert read (lookahead) and kernel boundaries (pdl) are not it. Vary the unit's k length (H for gate+up,
    # I for down) and the expert count apart, one configuration rule, to see which one the throughput follows
    timeout 540 python3 "$R/bench/profile_moe.py" --out "$OUT/unitk" --heuristic --pdl 0 --cells \
      e128k8h2048i768:16,e128k8h2048i3072:16,e128k8h4096i768:16,e8k2h4096i1536:16,e8k2h2048i14336:16,e8k2h4096i14336:16,e32k2h4096i3584:16 \
      2>&1 | tee "$OUT/moe_unitk.log" | grep -E "^==|gemm_kernel" | head -60 ;;
  moe-source)
    # where the many-expert small-T GEMM's stall samples sit (unit boundaries? barrier waits? the producer?),
    # beside Mixtral's; pdl off so each kernel runs alone
    for C in qwen3-30b-a3b:16 mixtral:16; do
      # -k matches the demangled name (namespace <layer>_gu::gemm_kernel), not the bare function name
      timeout 240 ncu --profile-from-start off --kernel-name-base demangled -k regex:_gu::gemm_kernel \
        --section SourceCounters --section WarpStateStats \
        -f -o "/tmp/src_${C%%:*}" python3 "$R/bench/profile_moe.py" --out /tmp/prof --ncu --pdl 0 --cells "$C" \
        > "$OUT/moe_source_${C%%:*}_run.log" 2>&1
      ncu --import "/tmp/src_${C%%:*}.ncu-rep" --page source --csv --print-source sass > "/tmp/src_${C%%:*}.csv" 2>&1
      gzip -c "/tmp/src_${C%%:*}.csv" > "$OUT/moe_source_${C%%:*}.csv.gz"
      cp "/tmp/src_${C%%:*}.ncu-rep" "$OUT/" 2>/dev/null   # to re-extract locally if the page's columns differ
      echo "== $C"; python3 "$R/bench/ncu_source_top.py" "/tmp/src_${C%%:*}.csv" --top 30 | tee "$OUT/moe_source_${C%%:*}.txt"
    done ;;
  moe-balance)
    # session 24: is the small-T GEMMs' shortfall load imbalance across SMs? ncu's per-SM active cycles
    # (min / avg / max over the 132 SMs) beside the kernel's elapsed cycles and DRAM throughput, for the
    # unit-count cells of moe-unitk (510 / 532 / 896 / 2040 units) and the shipped Qwen3 / DeepSeek T=16
    timeout 420 ncu --profile-from-start off -k regex:gemm_kernel --metrics \
      sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
      --csv python3 "$R/bench/profile_moe.py" --out /tmp/prof --ncu --pdl 0 --heuristic --cells \
      e128k8h2048i768:16,e128k8h2048i3072:16,e8k2h4096i1536:16,e8k2h4096i14336:16,e32k2h4096i3584:16 \
      > "$OUT/moe_balance.csv" 2> "$OUT/moe_balance_run.log"
    timeout 120 ncu --profile-from-start off -k regex:gemm_kernel --metrics \
      sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
      --csv python3 "$R/bench/profile_moe.py" --out /tmp/prof --ncu --pdl 0 --cells qwen3-30b-a3b:16,deepseek-v2-lite:16 \
      > "$OUT/moe_balance_shipped.csv" 2>> "$OUT/moe_balance_run.log"
    grep -c gemm_kernel "$OUT"/moe_balance*.csv; tail -3 "$OUT/moe_balance_run.log" ;;
  moe-flush)
    # session 24: time = ~27 us + bytes at 4.1 TB/s fits every small-T gate+up GEMM (moe-unitk), the down GEMMs
    # only ~6 us; hypothesis: the 256 MB flush written before each run leaves L2 full of dirty lines that the
    # first kernel with much traffic (gate+up) writes back. The same layers with the flush read instead, each with
    # the weights loaded evict_normal and evict_first (MoEConfig.weights_evict_first: the weights replace each other
    # in L2, not the flush's dirty lines)
    for FM in zero read; do
      timeout 270 python3 "$R/bench/profile_moe.py" --out "$OUT/flush_$FM" --flush $FM --pdl 0 --heuristic \
        --vary weights_evict_first=0,1 --cells \
        e128k8h2048i768:16,e128k8h2048i3072:16,e8k2h4096i1536:16,e8k2h4096i14336:16 2>&1 \
        | tee "$OUT/moe_flush_$FM.log" | grep -E "^==|gemm_kernel|elementwise|reduce" | head -40
    done ;;
  moe-ceilings)
    # session 40: what the layer saves with work left out (measurement copies, never verified or shipped)
    for what in launches padding; do
      timeout 270 python3 "$R/bench/moe_ceilings.py" --what $what 2>&1 | tee "$OUT/moe_ceilings_$what.log" | tail -8
    done ;;
  moe-ab)
    # session 41: one MoEConfig field A / B, verified layers, fp32-checked, interleaved rounds
    timeout 560 python3 "$R/bench/moe_ab.py" --check --vary "${3:-row_bounded=false,true}" ${4:+--cells "$4"} 2>&1 \
      | tee "$OUT/moe_ab.log" | tail -40 ;;
  moe-variants)
    # session 43: several MoEConfig fields at once per variant ("-;F=V;F=V,G=W"), the first the reference
    timeout 560 python3 "$R/bench/moe_ab.py" --check --variants="$3" ${4:+--cells "$4"} 2>&1 \
      | tee "$OUT/moe_variants.log" | tail -60 ;;
  moe-vllm)
    # session 44: vLLM's fused MoE timed directly beside our layer (no ANCHORS bridge). Its code is NOT in the
    # repository: .baselines/vllm_moe is git-ignored, so the run tool copies it only when its carry list names it
    # (carry: the .whl/ wheels and ".baselines/vllm_moe"); without it bench/moe_vllm.py stops and says so
    gpu_state
    # $4 (session 46): time ours and vLLM from CUDA graphs of $4 back-to-back calls (vLLM's per-call host path
    # was timed on one H100 machine of session 46: Qwen3 T = 16 0.308 / 0.309 ms per call on two machines, 0.470 on a third)
    moe_vllm_run "$OUT" 560 "$3" "$4" "$5" 45 ;;
  moe-accept)
    # session 48: issue 11's acceptance beside vLLM in one call (the H200 was lent for three calls of session 48
    # without the git-ignored vLLM folder): the 12 cells per call (L2 flushed, ANCHORS' method), then from CUDA
    # graphs of 8 calls, into $OUT/percall and $OUT/graph8 (carry .whl and .baselines/vllm_moe). Each run has its
    # own limit: the first pays for the nvcc batch and vLLM's Triton compiles (the 12 cells per call took 87 s on a
    # fresh H100 in session 48), the second finds both caches warm; a run cut by its limit keeps the cells it
    # finished (moe_vllm.py rewrites its .md table after each cell)
    gpu_state
    moe_vllm_run "$OUT/percall" 380 "$3" "" "" 16
    moe_vllm_run "$OUT/graph8" 190 "$3" 8 "" 16 ;;
  moe-dram-bytes)
    # session 40: bytes each kernel moves to / from DRAM (ncu, one serialized run, L2 kept between kernels)
    timeout 400 ncu --profile-from-start off --clock-control none --cache-control none \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      python3 "$R/bench/profile_moe.py" --out "$OUT/prof" --ncu --cells qwen3-30b-a3b:16,deepseek-v2-lite:16,mixtral:16,qwen3-30b-a3b:256 \
      > "$OUT/moe_dram_bytes.txt" 2>&1
    grep -E "^  [A-Za-z_].*\(|dram__|gpu__time" "$OUT/moe_dram_bytes.txt" | sed -E 's/ +/ /g' | cut -c1-160 | head -80 ;;
  moe-rb-ncu)
    # session 42 (planned after session 41's +18.6 % at Mixtral T = 256, 128-row tiles, row-bounded): the same layer
    # with row_bounded off / on under ncu, one serialized run each, L2 kept between kernels; the metrics name where
    # the time goes (DRAM and L2 bytes, L2 <-> SM traffic, the TMA unit's and the tensor pipe's busy share)
    timeout 500 ncu --profile-from-start off --clock-control none --cache-control none \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \
      python3 "$R/bench/profile_moe.py" --out "$OUT/prof" --ncu --cells "${3:-mixtral:256}" --vary row_bounded=false,true \
      > "$OUT/moe_rb_ncu.txt" 2>&1
    grep -E "^  [A-Za-z_].*\(|^==|__|Duration|Throughput|Busy|Hit Rate" "$OUT/moe_rb_ncu.txt" | sed -E 's/ +/ /g' | cut -c1-170 | head -160 ;;
  moe-tilek256)
    # session 38 (run in session 39: k 256 2-7 % slower, RESULTS.md): 256-deep k-tiles at the same weight bytes in flight (2 stages x 64 KB against
    # 8 x 16 KB): each W row read in 512-byte segments (vLLM's H200 config for E=128, N=768 at M = 16 takes
    # BLOCK_K 256), against the shipped 64-deep ones; the verifier admits gu128 / dn128 at 2 stages. Shipped entries,
    # pdl (and the handoff) as shipped, so the layer times are the comparison (per-kernel times include the waits)
    # (three runs of one configuration each: 64 x 8 / 8 stages as shipped at T = 16, 128 x 4 / 4, 256 x 2 / 2)
    C=qwen3-30b-a3b:16,deepseek-v2-lite:16,qwen3-30b-a3b:256,deepseek-v2-lite:256
    for KS in 64:8:8 128:4:4 256:2:2; do
      IFS=: read -r K G D <<< "$KS"
      timeout 160 python3 "$R/bench/profile_moe.py" --out "$OUT/tilek$K" --cells $C \
        --vary tile_k=$K --vary gu_stages=$G --vary dn_stages=$D 2>&1 | tee -a "$OUT/moe_tilek256.log" \
        | grep -E "^==|^--" | sed -e 's/bands.*argus_moe_sm90_bf16_//'
    done ;;
  moe-narrow)
    # session 24: the finest small-T units (n-tile 64, space.KNOBS) against 128 / 256, each with 5 / 8 / 12 stages
    # (gate+up) or 8 / 12 (down), the combinations that do not fit skipped and named (gate+up 128 x 12, 256 x 8 / 12);
    # T = 16, the heuristic's other fields, pdl off so each kernel is timed alone
    C=qwen3-30b-a3b:16,deepseek-v2-lite:16,mixtral:16
    timeout 330 python3 "$R/bench/profile_moe.py" --out "$OUT/narrow_gu" --heuristic --pdl 0 --cells $C \
      --vary gu_tile_n=64,128,256 --vary gu_stages=5,8,12 2>&1 | tee "$OUT/moe_narrow_gu.log" | grep -E "^==|^--|gemm_kernel" | head -80
    timeout 240 python3 "$R/bench/profile_moe.py" --out "$OUT/narrow_dn" --heuristic --pdl 0 --cells $C \
      --vary dn_tile_n=64,128 --vary dn_stages=8,12 2>&1 | tee "$OUT/moe_narrow_dn.log" | grep -E "^==|^--|gemm_kernel" | head -60 ;;
  moe-stalls)
    timeout 420 ncu --profile-from-start off -k regex:gemm_kernel --section SpeedOfLight --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters --section LaunchStats \
      -o "$OUT/moe_stalls" python3 "$R/bench/profile_moe.py" --out "$OUT/prof" --ncu \
      --cells qwen3-30b-a3b:16,deepseek-v2-lite:16,mixtral:16 > "$OUT/moe_stalls_run.log" 2>&1
    ncu --import "$OUT/moe_stalls.ncu-rep" --page details > "$OUT/moe_stalls.txt" 2>&1
    grep -E "gemm_kernel|Duration|DRAM Throughput|Stall|Warp Cycles Per Issued|No Eligible|Issued Warp" \
      "$OUT/moe_stalls.txt" | head -80 ;;
  moe-cli)
    RC=0
    for S in "8 2 4096 14336" "128 8 2048 768" "64 6 2048 1408"; do
      read -r E K H I <<< "$S"
      D="/tmp/moe_cli_t${3:-16}_e$E"
      rm -rf "$D"
      # the .cu / .h stay on the device (a call returns a limited number of files: session 23 lost a table so)
      timeout 150 argus-cutlass moe --tokens "${3:-16}" --experts "$E" --topk "$K" --hidden "$H" --ffn "$I" \
        --out "$D" > "$D.log" 2>&1 || RC=$?
      tee -a "$OUT/moe_cli.log" < "$D.log" | tail -12
      cp "$D"/*.json "$OUT/" 2>/dev/null
    done
    exit $RC ;;
  moe-mutants)
    # $3: comma-separated mutant ids (default: all of argus_cutlass/testing/mutants_moe.toml)
    timeout 560 python3 "$R/bench/mutants_moe_gpu.py" --out "$OUT" --timeout 60 ${3:+--ids "$3"} 2>&1 | tee "$OUT/moe_mutants.log" | tail -45 ;;
  moe-bench)
    gpu_state
    # $3: ARGUS_MOE_BENCH_COMPARE (1: also m128 and unbanded, the default; lookahead / pdl / pdlw8 / evict / handoff: that knob flipped)
    ARGUS_MOE_BENCH_COMPARE=${3:-1} ARGUS_BENCH_TABLE="$OUT/moe_table.md" timeout 560 python3 -m pytest -q -s -p no:cacheprovider \
      "$R/bench/test_moe_bench.py" > "$OUT/moe_bench.log" 2>&1; cat "$OUT/moe_table.md" 2>/dev/null || tail -20 "$OUT/moe_bench.log" ;;
  mutants18)
    timeout 300 python3 "$R/bench/mutants_gpu.py" --out "$OUT/gemm18" --timeout 10 --ids \
      c_bound_to_a,c_dtype_fp32,d_bound_to_b_staged,gemm_a_pair_offset_1,coop_d_col_major,swap_param_d_not_transposed,smem_sb_overlaps_sa_relation_retargeted,a_block_mode_n_assertion_restated \
      2>&1 | tee "$OUT/gemm_mutants18.log" | tail -15
    timeout 200 python3 "$R/bench/mutants_attention_gpu.py" --out "$OUT/attn18" --timeout 10 --ids kv_oob_nan \
      2>&1 | tee "$OUT/attn_mutants18.log" | tail -8 ;;
  moe-tune)
    timeout 560 python3 "$R/bench/tune_moe_grid.py" --out "$OUT/moe_tune" --budget "${3:-6}" ${4:+--cells "$4"} 2>&1 \
      | tee "$OUT/moe_tune.log" | grep -E "^\||wrote|building|planned|built in|: best" | tail -70 ;;
  attn-tune)
    timeout 560 python3 "$R/bench/tune_attention_grid.py" --out "$OUT/tune_s${3:-512}" --variants --seqlens "${3:-512}" 2>&1 \
      | tee "$OUT/attn_tune_s${3:-512}.log" | tail -20 ;;
  attn-epilogue)
    timeout 570 python3 "$R/bench/tune_attention_grid.py" --out "$OUT/tune_epilogue" --epilogue-only 2>&1 \
      | tee "$OUT/attn_epilogue.log" | tail -30 ;;
  attn-bench)
    ARGUS_BENCH_TABLE="$OUT/attention_table.md" timeout 560 python3 -m pytest -q -s -p no:cacheprovider \
      "$R/bench/test_attention_bench.py" 2>&1 | tail -5 > "$OUT/attention_bench.log"; cat "$OUT/attention_table.md" ;;
  gemm-small)
    # session 28: from CUDA graphs cuBLAS beats our best on 108 of 341 bf16 tn rows (0.57-0.9x), mostly GEMMs of
    # 5-20 us with small M x N and long K (8x8x4096 9.8 vs 5.6 us, 1x1024x8192 16.7 vs 9.6 us): few CTAs walk the
    # whole K loop (one 64x16 swap-AB tile: 16 CTAs at N = 1024). Hypothesis: a wider K split (8 / 16; declared
    # splits stop at 4, on the 128x16 / 128x32 cooperative swap-AB tiles) or stream-K fills the SMs. Each shape: the
    # graph-timed best of the table, the declared splits, copies with splits 8 / 16 (and 8 at k 128), cuBLAS
    # interleaved, all from graphs
    # (M <= 256: the swap-AB 128x16 tile; M > 256, N small: non-swap 128x16 / 128x32 cooperative copies of the
    # declared 128x128 split-K 4 kernel, since no declared non-swap tile is narrower than 64)
    SW=128x16x64_c1x1_s8_coop_e128x16_rn1_splitk4_swapab,128x16x64_c1x1_s8_coop_e128x16_rn1_streamk_swapab
    NS=128x128x64_c1x1_s6_coop_e128x32_rn1_splitk4
    for S in 8x8x4096 1x1024x8192 32x1024x8192 1x1024x5120 100x3584x4096 512x8x4096 1024x8x4096 512x1024x5120; do
      M=${S%%x*}
      if [ "$M" -le 256 ]; then
        A="--kernels $SW --also splits=8 --also splits=16 --also tile_k=128,stages=6,splits=8"
      else
        A="--kernels $NS --also tile_n=16,epi_n=16,stages=8,splits=8 --also tile_n=16,epi_n=16,stages=8,splits=16
           --also tile_n=32,epi_n=32,stages=8,splits=8 --also tile_n=16,epi_n=16,stages=8,scheduler=streamk,splits=1"
      fi
      timeout 70 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 3 --graph \
        --best-of "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" $A 2>&1 \
        | tee -a "$OUT/gemm_small.log" | grep -v "refused by the verifier\|^generated" | tail -14
    done ;;
  gemm-mid-ncu)
    # session 31 (run in session 32: bench/data/gemm_mid_ncu_h200_s32.txt): copies of cuBLAS's own tile / cluster /
    # depth lose on the 5-20 us rows it wins by 1.3-1.45x, so the gap is inside the kernel: ncu's speed-of-light, memory-workload and warp-state
    # sections of the graph table's best and of cuBLAS's kernels, one launch each (clocks and caches as they run)
    shift 2; SHAPES=${*:-1024x768x2048 256x1024x8192 512x1536x2048 1024x512x2048}
    for S in $SHAPES; do
      echo "== $S"
      timeout 150 ncu --profile-from-start off --cache-control none --clock-control none \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
        python3 "$R/bench/profile_gemm.py" --shape $S --ncu --ncu-cublas \
        --best-of "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" 2>&1 | grep -v "refused by the verifier\|^generated" \
        > "$OUT/gemm_mid_ncu_$S.txt"
      grep -E "^  [a-z_]|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Grid Size|Stall|Warp Cycles Per Issued" \
        "$OUT/gemm_mid_ncu_$S.txt" | cut -c1-200
    done ;;
  gemm-pipes)
    # session 32: the same 64x64 tile and grid as cuBLAS's kernel ran 1.4x longer per CTA; pipe utilization and
    # instruction counts showed twice cuBLAS's instructions, ALU 19 % / FMA 10 % against 5 % / 0.1 %
    S=${3:-1024x512x2048}; K=${4:-64x64x64_c1x1_s8_pp_e64x32_rn1+!swapab}
    timeout 300 ncu --profile-from-start off --cache-control none --clock-control none --print-details all \
      --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis --section SchedulerStats \
      python3 "$R/bench/profile_gemm.py" --shape $S --kernels "$K" --also tile_k=128,stages=6 --ncu --ncu-cublas 2>&1 \
      | grep -v "refused by the verifier\|^generated" > "$OUT/gemm_pipes_$S.txt"
    grep -E "^  [a-z]|Issued Instructions  |Stall (Wait|Long)|Tensor \(All\)|ALU  |FMA  |Uniform  " "$OUT/gemm_pipes_$S.txt" | cut -c1-160 ;;
  gemm-sass)
    # session 32: where the consumer's cycles go, instruction by instruction (the SASS between two wgmmas); the CSV
    # keeps address, SASS, stall samples (all / not issued) and executed count per instruction, one block per kernel
    S=${3:-1024x512x2048}; K=${4:-64x64x64_c1x1_s8_pp_e64x32_rn1+!swapab}
    timeout 300 ncu --profile-from-start off --cache-control none --clock-control none -f \
      --section SourceCounters --section WarpStateStats -o "/tmp/gemm_sass_$S" \
      python3 "$R/bench/profile_gemm.py" --shape $S --kernels "$K" --ncu --ncu-cublas > "$OUT/gemm_sass_$S.log" 2>&1 \
      && ncu -i "/tmp/gemm_sass_$S.ncu-rep" --page source --csv --print-source sass 2>>"$OUT/gemm_sass_$S.log" \
      | python3 -c '
import csv, sys
w = csv.writer(sys.stdout); keep = None
for r in csv.reader(sys.stdin):
    if r and r[0] == "Kernel Name":
        w.writerow(r[:2]); keep = None
    elif r and r[0] == "Address":
        keep = [r.index(c) for c in ("Address", "Source", "Warp Stall Sampling (All Samples)",
                                     "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed")]
        w.writerow([r[i] for i in keep])
    elif keep:
        w.writerow([r[i] for i in keep])
' > "$OUT/gemm_sass_$S.csv"
    grep -c "HGMMA" "$OUT/gemm_sass_$S.csv"; tail -3 "$OUT/gemm_sass_$S.log" ;;
  gemm-small-ncu)
    # session 29: gemm-small refuted wider K splits (split 8 / 16 slower everywhere, from graphs too). ncu with the
    # clocks and caches as they run (no lock, no flush): each kernel's GPU duration, SM-active cycles, DRAM bytes
    # and grid, ours (the table's best and split-K 4, with its workspace launches) beside cuBLAS's kernels
    SW=128x16x64_c1x1_s8_coop_e128x16_rn1_splitk4_swapab
    NS=128x128x64_c1x1_s6_coop_e128x32_rn1_splitk4
    for S in 8x8x4096 1x1024x8192 1x1024x5120 100x3584x4096 512x8x4096 512x1024x5120; do
      M=${S%%x*}; KS=$SW; [ "$M" -le 256 ] || KS=$NS
      echo "== $S" | tee -a "$OUT/gemm_small_ncu.csv"
      timeout 120 ncu --profile-from-start off --cache-control none --clock-control none --csv --print-units base \
        --metrics gpu__time_duration.sum,sm__cycles_active.avg,gpc__cycles_elapsed.max,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic \
        python3 "$R/bench/profile_gemm.py" --shape $S --kernels $KS --ncu --ncu-cublas \
        --best-of "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" 2>&1 | grep -v "refused by the verifier\|^generated" \
        | tee -a "$OUT/gemm_small_ncu.csv" | grep -E "gpu__time_duration|launch__grid_size|^launched" | cut -c1-260
    done ;;
  gemm-kscale)
    # session 29: gemm-small-ncu put our small-GEMM kernels at 10-17 us of GPU time where cuBLAS's split-K kernel +
    # its reduce kernel take 7-10 us, and split-K 4 no faster than the unsplit kernel on 8x8x4096. Is it a fixed cost
    # (prologue, first TMA, epilogue) or the cost of each k-block (the chain of dependent WGMMAs on one accumulator,
    # the TMA round trip)? 8x8xK for K from 512 to 32768, one launch each under ncu (clocks and caches as they run):
    # the unsplit swap-AB tiles with 1 and 2 accumulator sets, at 12 and 4 stages, split-K 4, cuBLAS
    KS="64x16x64_c1x1_s12_pp+swapab+!_as,64x16x64_c1x1_s12_pp+swapab+_as2,128x16x64_c1x1_s8_coop+splitk4+swapab"
    for K in 512 2048 8192 32768; do
      echo "== 8x8x$K" | tee -a "$OUT/gemm_kscale.csv"
      timeout 120 ncu --profile-from-start off --cache-control none --clock-control none --csv --print-units base \
        --metrics gpu__time_duration.sum,sm__cycles_active.avg,launch__grid_size \
        python3 "$R/bench/profile_gemm.py" --shape 8x8x$K --kernels "$KS" --also stages=4 --ncu --ncu-cublas 2>&1 \
        | grep -v "refused by the verifier\|^generated" | tee -a "$OUT/gemm_kscale.csv" \
        | grep -E "gpu__time_duration" | cut -d, -f5,15 | sed 's/argus_gemm_sm90_bf16_bf16_tn_//; s/_ns::gemm_kernel[^,]*//'
    done ;;
  gemm-clusterk)
    # session 29: gemm-kscale: one CTA of a narrow tile sums a 64-deep k-tile in ~148 ns (cuBLAS ~77 ns), stages
    # change nothing, and CUTLASS split-K costs ~5 us more than the unsplit kernel at K = 512 (its fixup through
    # global memory). Cluster-K (schedule node clusterk) splits the k loop over a cluster and adds the partial
    # sums through distributed shared memory. First silicon: the GPU tests, then the small GEMMs cuBLAS wins
    # from graphs: the table's best, split-K 4 and cluster-K 2 / 4 / 8 copies, cuBLAS interleaved, from graphs
    $PYT -m gpu "$R/tests/gpu/test_gemm_clusterk.py" -rf 2>&1 | tee "$OUT/gemm_clusterk_gpu.log" | tail -15
    SW=128x16x64_c1x1_s8_coop_e128x16_rn1_splitk4_swapab
    NS=128x128x64_c1x1_s6_coop_e128x32_rn1_splitk4
    for S in 8x8x4096 1x1024x8192 32x1024x8192 1x1024x5120 100x3584x4096 1x4096x14336 512x8x4096 512x1024x5120 1024x768x2048; do
      M=${S%%x*}
      if [ "$M" -le 256 ]; then
        A="--kernels $SW --also scheduler=clusterk,splits=2 --also scheduler=clusterk,splits=4 --also scheduler=clusterk,splits=8
           --also scheduler=clusterk,splits=4,tile_n=32,epi_n=32"
      else
        A="--kernels $NS --also tile_n=16,epi_n=16,stages=8,scheduler=clusterk,splits=4 --also tile_n=16,epi_n=16,stages=8,scheduler=clusterk,splits=8
           --also tile_n=32,epi_n=32,stages=8,scheduler=clusterk,splits=4 --also tile_n=64,epi_n=32,stages=8,scheduler=clusterk,splits=4"
      fi
      timeout 90 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 3 --graph \
        --best-of "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" $A 2>&1 \
        | tee -a "$OUT/gemm_clusterk.log" | grep -v "refused by the verifier\|^generated" | grep -A12 "^graph replay"
    done ;;
  gemm-clusterk-wide)
    # session 29 (queued, not run): the rows cuBLAS still wins by > 10 % from graphs after cluster-K on the 16 / 32
    # wide tiles are mid-size (12-60 output tiles of 128 x 128, K 2048-8192: 100x1024x8192 0.63x, 256x768x2048
    # 0.64x, 512x1024x5120 0.69x). Cluster-K copies of the declared 128x32 cluster-K 4 kernel on 128x64 and
    # 128x128 tiles (2 and 4 ranks), built and verified on CPU, never timed; the table's best and cuBLAS, from graphs
    for S in 100x1024x8192 256x1024x8192 256x1024x5120 100x3584x4096 256x768x2048 512x1024x5120 1024x768x2048 512x1536x2048; do
      M=${S%%x*}; KS=128x32x64_c1x1_s8_coop_e128x32_rn1_clusterk4_swapab; [ "$M" -le 256 ] || KS=128x32x64_c1x1_s8_coop_e128x32_rn1_clusterk4+!swapab
      timeout 70 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 3 --graph --kernels "$KS" \
        --best-of "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" --also tile_n=64,stages=7 \
        --also tile_n=128,stages=4,splits=2 --also tile_n=128,stages=4 2>&1 | tee -a "$OUT/gemm_clusterk_wide.log" \
        | grep -v "refused by the verifier\|^generated" | grep -A7 "^graph replay"
    done ;;
  mutants-clusterk)
    # session 29 (queued, not run): the cluster-K planted mistakes of mutants.toml, built from the production
    # template without the verifier and run on the runner's shapes (and the cluster-K base's short_k: 2 k-tiles
    # over 4 ranks)
    timeout 400 python3 "$R/bench/mutants_gpu.py" --out "$OUT/clusterk" --timeout 10 --ids \
      clusterk_split_drops_remainder,clusterk_reduce_from_0,clusterk_reduce_from_2,clusterk_empty_rank_not_zeroed,clusterk_no_release_barrier,clusterk_no_acquire_barrier \
      2>&1 | tee "$OUT/clusterk_mutants.log" | tail -15 ;;
  clusterk-product)
    # session 29: the product's own choice (shipped table, else the cost model) on small GEMMs where it now picks
    # cluster-K: one shape of the shipped table and three it has no entry for; checked and timed from CUDA graphs
    # beside cuBLAS by `argus-cutlass gemm` itself
    for S in "8 8 4096" "4 1536 7168" "16 640 12288" "2048 16 8192"; do
      read -r M N K <<< "$S"
      timeout 120 argus-cutlass gemm --m $M --n $N --k $K --out "/tmp/cli_$M" 2>&1 | tee -a "$OUT/clusterk_product.log" \
        | grep -v "^wrote\|^compil\|^verified\|^path\|^why" | cut -c1-220
    done ;;
  explore-tiles)
    # session 30: cuBLAS (nvjet) runs the mid-size rows on tiles sized to the SM count (N tiles of 56, 80, 96, 104,
    # 112, 144, 160, 168; 13-16 stages of 64x64): such copies, built in one batch, timed from graphs beside each row's
    # best and cuBLAS
    PLAN=${3:?explore-tiles needs a plan}; [ "${PLAN#/}" != "$PLAN" ] || PLAN="$R/$PLAN"
    timeout 560 python3 "$R/bench/explore_tiles.py" --plan "$PLAN" \
      --table "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" --out "$OUT/explore_tiles.json" 2>&1 \
      | tee "$OUT/explore_tiles.log" | grep -v "^generated" | tail -150 ;;
  cublas-kernels)
    # session 30: which cuBLAS kernels win the mid-size rows (torch profiler: names and GPU durations)
    timeout 300 python3 "$R/bench/cublas_kernels.py" --table "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" \
      --below "${3:-0.95}" --out "$OUT/cublas_kernels.json" 2>&1 | tee "$OUT/cublas_kernels.log" | cut -c1-400 | tail -40 ;;
  graph-product)
    # session 28: the product's graph timing (runtime.cuda.Graph, runtime.check.time_graph, --timing graph), first
    # silicon: the GPU tests, then the main job timed both ways on a decode shape
    $PYT -m gpu "$R/tests/gpu/test_runtime_gpu.py" "$R/tests/gpu/test_bench_timing_gpu.py" -rf 2>&1 \
      | tee "$OUT/graph_product_gpu.log" | tail -20
    # the main job per launch, then by default (graph), then a problem of the aligned staging path (graph)
    for S in "1 4096 14336 tn launch" "1 4096 14336 tn graph" "300 1024 1000 nt graph"; do
      read -r M N K L T <<< "$S"
      timeout 150 argus-cutlass gemm --m $M --n $N --k $K --layout $L $([ $T = launch ] && echo --timing launch) \
        --out "/tmp/cli_$M$T" 2>&1 | tee -a "$OUT/graph_product_cli.log" | grep -v "^wrote\|^compil" | tail -5
    done
    python3 -c "import glob, json, sys; json.dump({f: json.load(open(f)).get('timing') for f in sorted(glob.glob('/tmp/cli_*/*.json'))}, sys.stdout, indent=1)" \
      > "$OUT/graph_product_cli_timing.json" ;;
  gemm-swap)
    $PYT -m gpu "$R/tests/gpu/test_gemm.py" -k "swap or smem_model" -rf 2>&1 | tee "$OUT/gemm_swap_gpu.log" | tail -30 ;;
  gemm-bench)
    gpu_state
    # ANCHORS GEMM shapes vs cuBLAS, interleaved in one process; $3 = heuristic | costmodel | tuned
    ARGUS_BENCH_CONFIG=${3:-costmodel} ARGUS_BENCH_TABLE="$OUT/gemm_bench_${3:-costmodel}.md" timeout 560 python3 -m pytest -q -s \
      -p no:cacheprovider "$R/bench/test_gemm_bench.py" > "$OUT/gemm_bench_${3:-costmodel}.log" 2>&1
    cat "$OUT/gemm_bench_${3:-costmodel}.md" 2>/dev/null || tail -20 "$OUT/gemm_bench_${3:-costmodel}.log" ;;
  compile-latency)
    # issue 13 item 6: one cold nvcc build per family with a fresh cache, then the in-process cache hit
    timeout 300 python3 "$R/bench/compile_latency.py" --out "$OUT" 2>&1 | tee "$OUT/compile_latency.log" | tail -10 ;;
  gemm-splitk)
    # session 24: decode K splits cost 3-10 us where the unsplit kernel has tiles enough (RESULTS session 24);
    # hypothesis: the Deterministic fixup's serial turnstile. Timed (interleaved with cuBLAS, rotated operands),
    # then ncu: elapsed vs SM-active cycles, DRAM throughput, and where the split kernels' warps wait
    K=128x16x64_c1x1_s8_coop_e128x16_rn1_swapab,128x16x64+splitk2,128x16x64+splitk4,128x16x64+streamk
    for S in 1x4096x14336 1x14336x4096; do
      timeout 200 python3 "$R/bench/profile_gemm.py" --shape $S --kernels "$K" 2>&1 | tee "$OUT/splitk_time_$S.log" | tail -6
    done
    timeout 200 ncu --profile-from-start off -k regex:gemm_kernel --metrics \
      gpc__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum \
      --csv python3 "$R/bench/profile_gemm.py" --shape 1x4096x14336 --kernels "$K" --ncu > "$OUT/splitk_metrics.csv" 2>&1
    grep -E "gpc__cycles|sm__cycles_active.avg|dram__throughput" "$OUT/splitk_metrics.csv" | cut -c1-40,200-400 | head -20
    timeout 200 ncu --profile-from-start off -k regex:gemm_kernel --section SourceCounters --section WarpStateStats \
      -f -o /tmp/splitk_src python3 "$R/bench/profile_gemm.py" --shape 1x4096x14336 --kernels 128x16x64+splitk4 --ncu \
      > "$OUT/splitk_src_run.log" 2>&1
    ncu --import /tmp/splitk_src.ncu-rep --page source --csv --print-source sass > /tmp/splitk_src.csv 2>&1
    python3 "$R/bench/ncu_source_top.py" /tmp/splitk_src.csv --top 25 | tee "$OUT/splitk_source_top.txt" ;;
  gemm-deep)
    # session 24: decode time follows the bytes in flight per CTA (Little's law, ~1.9 us loaded latency: RESULTS
    # session 24); few-tile shapes (N <= 5120: 56-80 swap-AB tiles of 64 rows) may saturate HBM with a deeper
    # pipeline instead of K splits. The 64-row ping-pong tile at 12 stages (declared) vs 22 (all that fits), the
    # best split and 128-row kernels beside them, cuBLAS interleaved
    for S in 1x4096x14336 1x3584x14336 1x4096x12288 1x5120x8192 1x5120x25600 1x8192x8192 1x14336x4096; do
      timeout 120 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 5 --also stages=22 \
        --kernels 64x16x64_c1x1_s12_pp+!_as,128x16x64_c1x1_s12_coop,128x16x64+splitk2 2>&1 | tee "$OUT/deep_$S.log" | tail -7
    done
    timeout 120 python3 "$R/bench/profile_gemm.py" --shape 32x4096x14336 --rounds 5 --also stages=18 \
      --kernels 64x32x64_c1x1_s12_pp,128x32x64_c1x1_s8_coop_e128x32_rn1_swapab 2>&1 | tee "$OUT/deep_32x4096x14336.log" | tail -6 ;;
  gemm-k128)
    # session 25: on few-tile decode shapes a CTA streams ~47 GB/s with 64 x 64 weight boxes (8 KB per stage) and ~85 GB/s
    # with 128 x 64 (16 KB): ~5.5-6 M stages/s per SM either way, and 22 stages instead of 12 changed nothing (not bytes
    # in flight, Little's law refuted): a per-stage cost. Hypothesis: 128-deep k-tiles (16 / 32 KB per stage) double
    # the bytes per stage and so a CTA's rate. The other reading: the consumer waits on its chain of dependent wgmmas
    # (4 per 64-deep k-tile, each into the same accumulator); then k 128 changes nothing and independent accumulator
    # sets (GemmConfig.acc_sets 2 / 4: k-block b into set b % S) raise the rate. Each shape: the 64-row ping-pong and
    # 128-row cooperative tiles at k 64 (declared), k 128, acc_sets 2 / 4 and both (copies, the depths that fit; the
    # rest refused and named), cuBLAS interleaved
    for S in 1x4096x14336 1x3584x14336 1x5120x8192 1x8192x8192 1x14336x4096 16x4096x14336 32x4096x14336; do
      KS=64x16x64_c1x1_s12_pp+!_as,128x16x64_c1x1_s12_coop
      case $S in 32x*) KS=64x32x64_c1x1_s12_pp,128x32x64_c1x1_s8_coop_e128x32_rn1_swapab ;; esac
      timeout 150 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 5 --kernels "$KS" \
        --also tile_k=128,stages=11 --also tile_k=128,stages=8 --also tile_k=128,stages=6 --also tile_k=128,stages=5 \
        --also acc_sets=2 --also acc_sets=4 --also tile_k=128,stages=5,acc_sets=4 2>&1 \
        | tee -a "$OUT/gemm_k128.log" | grep -v "refused by the verifier" | tail -16
    done ;;
  gemm-k256)
    # session 38 (run in session 39: no gain, RESULTS.md): 256-deep k-tiles on the decode rows still past 1.15x the weight-read floor --
    # each weight row read in 512-byte segments instead of 256 (k 128, the declared decode kernels) or 128 (k 64),
    # the same weight bytes per stage as twice the k-128 stages (vLLM's H200 MoE configs at M <= 16 take BLOCK_K 256);
    # copies of the declared 64- / 128-row swap-AB kernels at the depths that fit (the rest refused and named), the
    # declared kernels and cuBLAS in the same rounds
    for S in 1x3584x14336 1x4096x12288 1x5120x8192 1x8192x5120 1x10240x5120 32x4096x14336 64x3584x14336; do
      KS=64x16x128,128x16x128,64x32x128
      timeout 150 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 5 --kernels "$KS" \
        --also tile_k=256,stages=5 --also tile_k=256,stages=4 --also tile_k=256,stages=3 --also tile_k=256,stages=2 \
        --also tile_k=256,stages=4,acc_sets=2 2>&1 | tee -a "$OUT/gemm_k256.log" | grep -v "refused by the verifier" | tail -20
    done ;;
  gemm-k128b)
    # session 26: 128-deep k-tiles and 2 accumulator sets took ~10 % off few-tile decode shapes; the rows still past
    # 1.15x the floor are 84-168 MB weights. Each: the declared 64x16x128 (2 sets, 8 stages) and 128x16x128 (6 stages)
    # kernels deeper and with more sets, and the 128x16 split-K 2 / 4 and stream-K kernels at k 128 with 2 sets and
    # with the nondeterministic reduction (session 25: split 4 costs ~6 us of fixup; GemmConfig.reduction, not on
    # silicon before this step: run gemm-swap first for its numerics), copies the verifier refuses named,
    # cuBLAS interleaved
    for S in 1x3584x14336 1x4096x12288 1x5120x8192 1x8192x5120 1x10240x5120 1x12288x4096 32x4096x14336 64x3584x14336; do
      KS="64x16x128_c1x1_s8_pp+_as2,128x16x128_c1x1_s6_coop,128x16x64+splitk,128x16x64+streamk"
      case $S in 32x*|64x*) KS="64x32x128_c1x1_s8_pp,64x64x128,128x32x64+splitk,128x32x64+streamk" ;; esac
      timeout 240 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 5 --kernels "$KS" \
        --also stages=10 --also acc_sets=4 --also acc_sets=2 --also stages=10,acc_sets=4 \
        --also tile_k=128,stages=5,acc_sets=2 --also reduction=nondeterministic \
        --also tile_k=128,stages=5,acc_sets=2,reduction=nondeterministic 2>&1 \
        | tee -a "$OUT/gemm_k128b.log" | grep -v "refused by the verifier" | tail -40
    done ;;
  read-floor)
    # session 26: the decode rows with 84-168 MB weights sit 1.16-1.49x above bytes / 4.3 TB/s, the 0.5-0.9 GB ones at
    # 0.98-1.0x: how much of that a kernel that only reads the bytes (launch included) also pays
    timeout 400 python3 "$R/bench/read_floor.py" --m 1 --out "$OUT/read_floor.json" 2>&1 | tee "$OUT/read_floor.log" | tail -26 ;;
  decode-graph)
    # session 27: a plain read of 84-134 MB costs 1.13-1.23x bytes / 4.3 TB/s one launch between CUDA events (session
    # 27 read-floor), ~4.5 us above the floor whatever the size. The same read kernels, and the sweep's best GEMM
    # beside cuBLAS on decode rows, as back-to-back launches replayed from a CUDA graph (how a serving engine runs
    # decode; METHOD.md), next to their per-launch times
    timeout 200 python3 "$R/bench/read_floor.py" --m 1 --graph --out "$OUT/read_floor_graph.json" 2>&1 \
      | tee "$OUT/read_floor_graph.log" | tail -24
    for S in 1x5120x8192 1x4096x12288 1x3584x14336 1x4096x14336 1x14336x4096 1x8192x8192 1x10240x8192 \
             1x57344x8192 8x4096x14336 32x4096x14336 64x3584x14336 64x5120x25600; do
      timeout 120 python3 "$R/bench/profile_gemm.py" --shape $S --rounds 5 --graph \
        --best-of "$R/bench/data/gemm_sweep_bf16_bf16_tn_h200.json" 2>&1 \
        | tee -a "$OUT/decode_graph.log" | grep -v "^generated" | tail -4
    done ;;
  gemm-pdl)
    # session 45: issue 13 item 2, the launch node pdl (GemmConfig.pdl) on the decode rows the sweep's best misses
    # the 1.15x weight-read floor by 3-5 us: each shape's graph-table best beside its pdl twin, checked against fp32,
    # timed per launch and from CUDA graphs of back-to-back launches (the pdl twin's launch + prologue then overlap
    # the previous launch: the serving-engine stream), cuBLAS interleaved. $3: comma-separated shapes
    SH=${3:-8x8192x5120,1x5120x8192,64x5120x8192,32x4096x12288,64x3584x14336,1x3584x14336,32x14336x4096,64x8192x8192}
    T0=$(date +%s)
    for S in ${SH//,/ }; do
      [ $(( $(date +%s) - T0 )) -gt 480 ] && { echo "stopping: 480 s spent, $S and later left" | tee -a "$OUT/gemm_pdl.log"; break; }
      timeout 240 python3 "$R/bench/profile_gemm.py" --shape "$S" --best-of "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json" \
        --graph --also pdl=true --rounds 5 2>&1 | grep -v "^generated" | tee -a "$OUT/gemm_pdl.log" | tail -8
    done ;;
  gemm-cv-confirm)
    # session 45: issue 13 item 1 scored within one process. The graph table's rows were timed in several device
    # sessions, and the 3 % criterion sits at their repeatability (a kernel picked by a row's first graph timing is
    # within 3 % of the second timing's best on 300 of 341 rows: sweep_gemm --summary). Here each row's finalists
    # (within 5 % of its best) and the cost model's HELD-OUT choice (calibrate_costmodel --cv --picks-out) are
    # re-timed together, interleaved, 5 rounds, cuBLAS too, into a copy of the graph table (resumable: copy
    # $OUT/sweep/gemm_sweep_bf16_bf16_tn_graph_cv_h200.json back to bench/data between calls), then scored
    G="$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json"; PL="$R/bench/data/gemm_sweep_bf16_bf16_tn_h200.json"
    mkdir -p "$OUT/sweep"; T="$OUT/sweep/gemm_sweep_bf16_bf16_tn_graph_cv_h200.json"
    cp "$R/bench/data/gemm_sweep_bf16_bf16_tn_graph_cv_h200.json" "$T" 2>/dev/null || cp "$G" "$T"
    python3 "$R/bench/calibrate_costmodel.py" --cv "$G" --cv-residuals "$PL" --cv-residuals "$G" \
      --picks-out "$OUT/sweep/picks_cv.json" 2>&1 | tee "$OUT/gemm_cv_picks.log" | tail -3
    timeout 520 python3 "$R/bench/sweep_gemm.py" --table "$T" --refine --graph --redo cv-s45 --refine-within 0.05 \
      --picks "$OUT/sweep/picks_cv.json" ${3:+--m "$3"} --max-seconds "${ARGUS_SWEEP_SECONDS:-400}" 2>&1 \
      | tee "$OUT/gemm_cv_confirm.log" | grep -v "^generated" | tail -8
    python3 "$R/bench/calibrate_costmodel.py" --cv "$T" --cv-residuals "$PL" --cv-residuals "$G" --cv-redone cv-s45 2>&1 \
      | tee "$OUT/gemm_cv_score.log" | tail -3 ;;
  gemm-graph)
    # session 27: one launch between CUDA events times a ~25 us decode kernel partly by the host (the per-call host
    # cost is printed first); the decode rows (M 1/8/32/64, weights >= 60 MiB) re-timed as back-to-back launches
    # replayed from a CUDA graph, cuBLAS too, each row's kernels within 20 % of its per-launch best and the untuned
    # choices, into gemm_sweep_<flavor>_graph_h200.json (resumable: commit it back to bench/data between calls)
    FL=${3:-bf16_bf16_tn}
    IFS=_ read -r DT OD LY <<< "$FL"
    timeout 120 python3 "$R/bench/profile_gemm.py" --shape 1x5120x8192 --graph --kernels 128x16x128_c1x1_s6 \
      --dtype "$DT" --out-dtype "$OD" --layout "$LY" --best-of "$R/bench/data/gemm_sweep_${FL}_h200.json" 2>&1 \
      | tee "$OUT/host_cost.log" | grep -v "^generated"
    mkdir -p "$OUT/sweep"
    T="$OUT/sweep/gemm_sweep_${FL}_graph_h200.json"
    cp "$R/bench/data/gemm_sweep_${FL}_graph_h200.json" "$T" 2>/dev/null
    timeout 470 python3 "$R/bench/sweep_gemm.py" --table "$T" --refine --graph --refine-within 0.2 \
      --from-table "$R/bench/data/gemm_sweep_${FL}_h200.json" --m "${4:-1,8,32,64}" --min-weight-mb "${ARGUS_MIN_WEIGHT_MB:-60}" \
      --max-seconds "${ARGUS_SWEEP_SECONDS:-330}" 2>&1 | tee "$OUT/gemm_graph_$FL.log" | tail -12 ;;
  gemm-decode-ncu)
    # issue 13 item 2: the ~100 MB decode weights sit 11-13 us above their 24-30 us floor whatever the kernel, the
    # largest at it; ncu of the shipped kernels of both kinds (DRAM throughput, launch, occupancy, stalls)
    for S in 1x3584x14336 64x3584x14336 1x4096x12288 1x57344x8192; do
      IFS=x read -r M N K <<< "$S"
      timeout 150 ncu -k regex:gemm_kernel -c 4 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section LaunchStats --section Occupancy --section WarpStateStats \
        argus-cutlass gemm --m "$M" --n "$N" --k "$K" --out "$OUT/decode_$S" > "$OUT/decode_ncu_$S.txt" 2>&1
      echo "== $S"; grep -E "argus_gemm|Duration|DRAM Throughput|Memory Throughput|Grid Size|Registers Per|Achieved Occupancy|Stall Long" \
        "$OUT/decode_ncu_$S.txt" | head -24
    done ;;
  gemm-sweep|gemm-refine|gemm-extend)
    FL=${3:-bf16_bf16_tn}
    IFS=_ read -r DT OD LY <<< "$FL"
    mkdir -p "$OUT/sweep"
    # ARGUS_SWEEP_SHAPES (default models; e.g. random:40:1, a calibration set apart from the models') and
    # ARGUS_SWEEP_TAG (e.g. calib: the table is then gemm_sweep_<flavor>_<tag>_h200.json)
    TB="gemm_sweep_${FL}${ARGUS_SWEEP_TAG:+_$ARGUS_SWEEP_TAG}_h200.json"
    T="$OUT/sweep/$TB"
    cp "$R/bench/data/$TB" "$T" 2>/dev/null || [ "$STEP" = gemm-sweep ] || exit 1
    # ARGUS_SWEEP_FROM=bench/data/gemm_sweep_bf16_bf16_tn_h200.json: per shape only that table's finalists in
    # this flavor (issue 13 item 4's fp16 / nt / fp32-output tables in one or two calls each)
    MODE="--dtype $DT --out-dtype $OD --layout $LY --shapes ${ARGUS_SWEEP_SHAPES:-models} ${4:+--m $4}"
    MODE="$MODE${ARGUS_SWEEP_FROM:+ --from-table $R/$ARGUS_SWEEP_FROM}"
    # ARGUS_REDO=LABEL: every row's finalists again (after a template change), marked redo: LABEL; $4 keeps some M
    [ "$STEP" = gemm-refine ] && MODE="--refine$([ "$ARGUS_SWEEP_TAG" = graph ] && echo " --graph")${ARGUS_REDO:+ --redo $ARGUS_REDO}${4:+ --m $4} --refine-within ${ARGUS_REFINE_WITHIN:-0.10}"
    [ "$STEP" = gemm-extend ] && MODE="--extend ${ARGUS_EXTEND:?gemm-extend needs ARGUS_EXTEND=SELECTORS} ${4:+--m $4}${ARGUS_MAX_CTAS:+ --max-ctas $ARGUS_MAX_CTAS}"
    timeout 575 python3 "$R/bench/sweep_gemm.py" --table "$T" $MODE --max-seconds "${ARGUS_SWEEP_SECONDS:-420}" 2>&1 \
      | tee "$OUT/${STEP}_$FL.log" | tail -40 ;;
  *) echo "unknown step $STEP (see the header of this script)"; exit 2 ;;
esac
