"""SMT tier: z3 bit-vector proofs of what enumeration cannot cover.

* G3 ``k.coverage``: for **symbolic** K in [1, 2^bits) (``bits`` = the k loop's ``bound_bits``,
  24 unless the problem needs more; the host entry refuses a larger K), the k loop
  (``k_tiles(K)`` k-tiles of ``k_blocks`` GMMA k-blocks) sums every k in [0, K) exactly once.
* G6 ``pipeline.state`` / ``pipeline.stage`` / ``pipeline.parity`` / ``pipeline.carry``: for
  every iteration i < 2^bits, every k-tile count and every persistent tile: ``PipelineState``'s
  closed form is what ``operator++`` computes (induction), read stage == write stage ==
  i mod S, the consumer waits parity (i / S) & 1 and the producer 1 ^ that (the release of
  i - S), and the state is carried across tiles, with the consumer's state moved per schedule
  (:func:`~argus_cutlass.hw.semantics.consumer_counter`: ping-pong groups skip each other's tile).
* G1/G5 cross-check ``mma.k_agreement`` / ``tma.image``: the TMA box map and the GMMA read map
  on bit-vectors, with the TMA writer as an existential witness plus the side queries
  (writes in the buffer, injective, so bijective by counting; reads in the buffer).

All hardware semantics come from :mod:`argus_cutlass.hw.semantics` (shared with the
enumeration tier). ``z3`` is imported lazily. Every query runs under a timeout
(``timeout_ms``); a timeout or z3 ``unknown`` gives an :class:`~.report.Unknown` naming the
query, never a proof. Satisfiable queries search small scopes first and then shrink the model
(binary search on its size measure), so counterexamples are small.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from argus_cutlass.dsl.ir import Program
from argus_cutlass.hw.semantics import (
    INT_OPS,
    Z3Ops,
    consumer_counter,
    k_of_slot,
    k_tiles_of,
    layout_offset,
    pipeline_state,
    pipeline_step,
    side_counter,
    tma_box_offset,
)
from argus_cutlass.verify.pipeline import CONSUMER_THREAD, PRODUCER_THREAD, Schedule, schedule_of
from argus_cutlass.verify.report import Counterexample, Proof, Unknown, Violation

#: default per-query timeout (ms); the caller (``verify_gemm(smt_timeout_ms=...)``, CLI
#: ``--smt-timeout-ms``) overrides it
DEFAULT_TIMEOUT_MS = 5000


def require_z3() -> None:
    """Raise a clear error when the SMT tier is asked for and z3 is not installed.

    Raises:
        ToolchainError: ``toolchain.z3``.
    """
    try:
        import z3  # noqa: F401
    except ImportError:
        from argus_cutlass.errors import ToolchainError

        raise ToolchainError(
            "toolchain.z3", "the verifier's SMT tier needs z3-solver, which is not installed",
            "pip install z3-solver (a dependency of argus_cutlass), or verify without the SMT tier "
            "(verify_gemm(..., smt=False); argus-cutlass verify --no-smt)",
        ) from None
#: bits of the symbolic sizes when a program has no k loop (K and iteration counters < 2^24)
DEFAULT_BOUND_BITS = 24


def bound_bits(program: Program) -> int:
    """The program's symbolic-size bound: K and iteration counters are proved below ``2**bits``
    (``KLoop.bound_bits``)."""
    kl = program.kloop
    return kl.bound_bits if kl is not None else DEFAULT_BOUND_BITS

Outcome = tuple[list[Proof], list[Violation], list[Unknown]]

#: decided outcomes by (check, program part, timeout); outcomes with an ``unknown`` are not kept
_MEMO: dict[tuple[Any, ...], Outcome] = {}
_MEMO_LIMIT = 4096


def _memoised(key: tuple[Any, ...], compute: Callable[[], Outcome]) -> Outcome:
    """``compute()``, memoised on ``key`` (the frozen IR nodes a check reads): the agent verifies
    many configurations that share a pipeline or a k loop. Proof times are the first run's."""
    hit = _MEMO.get(key)
    if hit is not None:
        return list(hit[0]), list(hit[1]), []
    out = compute()
    if not out[2]:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        _MEMO[key] = (list(out[0]), list(out[1]), [])
    return out


@dataclass(frozen=True)
class QueryResult:
    """Outcome of one query ``domain and not goal``.

    ``status``: ``proved`` (unsat), ``violated`` (sat; ``model`` holds the named variables) or
    ``unknown`` (timeout or z3 gave up; ``reason``)."""

    name: str
    status: str
    model: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    reason: str = ""


def run_query(name: str, variables: dict[str, Any], domain: list[Any], violation: Any, *,
              timeout_ms: int = DEFAULT_TIMEOUT_MS, scopes: tuple[list[Any], ...] = (),
              measure: Any = None) -> QueryResult:
    """Search for a point of ``domain`` where ``violation`` holds.

    Args:
        name: the query's name (reported on ``unknown``).
        variables: z3 terms whose model values a counterexample reports, by name.
        domain: constraints bounding every variable (unsigned, no overflow).
        violation: the negated goal.
        timeout_ms: per solver call; z3 ``unknown`` (timeout included) -> status ``unknown``.
        scopes: extra constraint lists tried first (small scopes); the full domain last.
        measure: a term to minimise in a found model (binary search, each step under the
            same timeout; a step that is not ``sat`` stops the search).
    """
    import z3

    t0 = time.perf_counter()

    def check(extra: list[Any]) -> tuple[Any, Any]:
        s = z3.Solver()
        s.set("timeout", int(timeout_ms))
        s.add(*domain, violation, *extra)
        r = s.check()
        return r, (s.model() if r == z3.sat else s.reason_unknown() if r == z3.unknown else None)

    for extra in (*scopes, []):
        r, info = check(extra)
        if r == z3.unknown:
            return QueryResult(name, "unknown", {}, time.perf_counter() - t0, str(info))
        if r == z3.unsat:
            continue
        model = info
        if measure is not None:
            lo, hi = 0, model.eval(measure, model_completion=True).as_long()
            while lo < hi:
                mid = (lo + hi) // 2
                r2, m2 = check(extra + [z3.ULE(measure, mid)])
                if r2 == z3.sat:
                    model, hi = m2, m2.eval(measure, model_completion=True).as_long()
                elif r2 == z3.unsat:
                    lo = mid + 1
                else:
                    break
        values = {k: model.eval(v, model_completion=True).as_long() for k, v in variables.items()}
        return QueryResult(name, "violated", values, time.perf_counter() - t0)
    return QueryResult(name, "proved", {}, time.perf_counter() - t0)


def _ule(a: Any, b: Any) -> Any:
    import z3

    return z3.ULE(a, b)


# --------------------------------------------------------------------------- G6


def check_pipeline_smt(program: Program, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Outcome:
    """G6 for all iterations i < 2^bits, k-tile counts k_tiles in [1, 2^bits), tiles t with
    t * k_tiles + k_tile < 2^bits (``bits`` = :func:`bound_bits`; vectors of ``2 bits + 4`` bits:
    no product overflows).

    Queries: ``pipeline.state`` (per side: ``pipeline_step(closed(n)) == closed(n + 1)`` and
    ``closed(0) == (0, start_phase)``, i.e. the closed form is what ``operator++`` computes);
    ``pipeline.stage`` (producer and consumer index == i mod S); ``pipeline.parity``
    (consumer waits parity (i / S) & 1: its stage has been filled i / S times before; the
    producer waits 1 ^ that: the release of i - S); ``pipeline.carry`` (each side's state at
    the start of tile t is the state after t * k_tiles iterations).
    """
    sched = schedule_of(program)
    bits = bound_bits(program)
    return _memoised(("pipeline", program.pipeline, sched, bits, timeout_ms),
                     lambda: _check_pipeline_smt(program, sched, bits, timeout_ms))


def _counter(ops: Any, side_name: str, side: Any, t: Any, kt: Any, KT: Any, sched: Schedule,
             split: tuple[Any, Any] | None = None) -> Any:
    if side_name == "producer":
        return side_counter(ops, t, kt, KT, side.carry_across_tiles)
    return consumer_counter(ops, t, kt, KT, side.carry_across_tiles, sched.stride, sched.turn_skip, split)


def _check_pipeline_smt(program: Program, sched: Schedule, bits: int, timeout_ms: int) -> Outcome:
    import z3

    pipe = program.pipeline
    assert pipe is not None
    S = pipe.stages
    BOUND = 1 << bits
    o = Z3Ops(2 * bits + 4)
    KT, kt = o.var("k_tiles"), o.var("k_tile")
    split = None
    if sched.stride > 1:
        # the tile as (group w, its j-th own tile): t = j * stride + w, no bit-vector division
        w, jj = o.var("group"), o.var("own_tile")
        t = o.add(o.mul(jj, sched.stride), w)
        split = (w, jj)
        extra = [z3.ULT(w, sched.stride), z3.ULT(jj, BOUND)]
    else:
        t = o.var("tile")
        extra = []
    g = o.add(o.mul(t, KT), kt)
    dom = [z3.ULT(0, KT), z3.ULT(KT, BOUND), z3.ULT(kt, KT), z3.ULT(t, BOUND), z3.ULT(g, BOUND), *extra]
    small = ([_ule(t, 2), _ule(KT, 2 * S + 1)],)
    names = {"tile": t, "k_tiles": KT, "k_tile": kt, "i": g}
    sides = {"producer": pipe.producer, "consumer": pipe.consumer}
    state = {}
    for side_name, side in sides.items():
        cnt = _counter(o, side_name, side, t, kt, KT, sched, split)
        state[side_name] = pipeline_state(o, cnt, side.wrap, side.start_phase)
    spec_stage = o.urem(g, S)
    spec_cparity = o.and_(o.udiv(g, S), 1)
    spec_pparity = o.xor(spec_cparity, 1)

    queries: list[tuple[str, str, Any, dict, Any, Callable[[dict], tuple[str, str, str, str]]]] = []
    o26 = Z3Ops(bits + 2 + max(1, S).bit_length())  # n + 1 and q * wrap fit: no overflow
    n, q, idx = o26.var("n"), o26.var("q"), o26.var("index")
    state_dom: dict[str, list[Any]] = {}
    for side_name, side in sides.items():
        # induction on n < 2^bits: if (index, phase) is the closed form of n (Euclid:
        # n = q * wrap + index, index < wrap, phase = phase0 ^ (q & 1); unique, so no division
        # is needed), then operator++ gives the closed form of n + 1 (witness q' = q + wrapped)
        ph = o26.xor(o26.and_(q, 1), side.start_phase)
        nidx, nph = pipeline_step(o26, idx, ph, S)
        q1 = o26.ite(o26.eq(nidx, 0), o26.add(q, 1), q)
        state_dom[side_name] = [z3.ULT(n, BOUND - 1), n == o26.add(o26.mul(q, side.wrap), idx),
                                z3.ULT(idx, side.wrap), z3.ULE(q, BOUND // side.wrap + 1)]
        bad = z3.Or(o26.add(n, 1) != o26.add(o26.mul(q1, side.wrap), nidx), z3.Not(z3.ULT(nidx, side.wrap)),
                    nph != o26.xor(o26.and_(q1, 1), side.start_phase))

        def explain_state(m: dict, side_name: str = side_name, side: Any = side) -> tuple[str, str, str, str]:
            nn = m["n"]
            i0, p0 = pipeline_state(INT_OPS, nn, side.wrap, side.start_phase)
            i1, p1 = pipeline_state(INT_OPS, nn + 1, side.wrap, side.start_phase)
            s1, q1 = pipeline_step(INT_OPS, i0, p0, S)
            return (side_name,
                    f"state after {nn + 1} increments = operator++ of ({i0}, {p0}) = ({s1}, {q1})",
                    f"{side_name} computes ({i1}, {p1}) (wraps at {side.wrap}, not {S} stages)",
                    f"{side_name} PipelineState index/phase after n={nn} increments")

        queries.append(("pipeline.state", f"{side_name} PipelineState closed form == operator++", bad,
                        {"n": n, "side": side_name}, n, explain_state))
    for side_name, (idx, ph) in state.items():
        spec_par = spec_pparity if side_name == "producer" else spec_cparity

        def explain_stage(m: dict, side_name: str = side_name) -> tuple[str, str, str, str]:
            side = sides[side_name]
            cnt = _counter(INT_OPS, side_name, side, m["tile"], m["k_tile"], m["k_tiles"], sched)
            s, _ = pipeline_state(INT_OPS, cnt, side.wrap, side.start_phase)
            return (side_name, f"stage {m['i'] % S} (= i mod {S})", f"{side_name} uses stage {s}",
                    f"{side_name} stage of iteration i={m['i']}")

        def explain_parity(m: dict, side_name: str = side_name) -> tuple[str, str, str, str]:
            side = sides[side_name]
            cnt = _counter(INT_OPS, side_name, side, m["tile"], m["k_tile"], m["k_tiles"], sched)
            _, p = pipeline_state(INT_OPS, cnt, side.wrap, side.start_phase)
            fills = m["i"] // S
            want = (fills & 1) ^ (1 if side_name == "producer" else 0)
            what = (f"its stage was filled {fills} times before" if side_name == "consumer" else
                    f"the release of iteration i-S={m['i'] - S}" if m["i"] >= S else "no release yet (first pass)")
            return (side_name, f"wait parity {want} ({what})", f"{side_name} waits parity {p}",
                    f"{side_name} barrier wait of iteration i={m['i']}")

        queries.append(("pipeline.stage", f"{side_name} stage == i mod S", idx != spec_stage, names, g,
                        explain_stage))
        queries.append(("pipeline.parity", f"{side_name} wait parity", ph != spec_par, names, g, explain_parity))
    for side_name, side in sides.items():
        cnt0 = _counter(o, side_name, side, t, 0, KT, sched, split)
        a = pipeline_state(o, cnt0, side.wrap, side.start_phase)
        b = pipeline_state(o, o.mul(t, KT), side.wrap, side.start_phase)
        bad = z3.And(z3.Or(a[0] != b[0], a[1] != b[1]), z3.ULT(o.mul(t, KT), BOUND))

        def explain_carry(m: dict, side_name: str = side_name, side: Any = side) -> tuple[str, str, str, str]:
            tt, kk = m["tile"], m["k_tiles"]
            want = pipeline_state(INT_OPS, tt * kk, side.wrap, side.start_phase)
            got = pipeline_state(INT_OPS, _counter(INT_OPS, side_name, side, tt, 0, kk, sched), side.wrap,
                                 side.start_phase)
            return (side_name, f"(index, phase) = {want} after {tt * kk} iterations of earlier tiles",
                    f"{side_name} restarts tile {tt} at {got}", f"{side_name} state at the start of tile {tt}")

        queries.append(("pipeline.carry", f"{side_name} state carried across persistent tiles", bad,
                        {"tile": t, "k_tiles": KT}, o.add(t, KT), explain_carry))

    proofs: list[Proof] = []
    violations: list[Violation] = []
    unknowns: list[Unknown] = []
    failed: set[str] = set()
    for rule, qname, bad, vars_, measure, explain in queries:
        if rule in failed:
            continue
        state_side = vars_.pop("side", None) if "side" in vars_ else None
        dom_q = state_dom[state_side] if state_side else dom
        scopes = ([_ule(n, 4 * S)],) if "n" in vars_ else small
        res = run_query(f"G6 {rule}: {qname}", vars_, dom_q, bad, timeout_ms=timeout_ms, scopes=scopes,
                        measure=measure)
        if res.status == "proved":
            scope = (f"n < 2^{bits}" if "n" in vars_ else f"all i < 2^{bits}, k_tiles in [1, 2^{bits}), persistent "
                     f"tiles{', ping-pong turns' if sched.stride == 2 else ''}")
            proofs.append(Proof(rule, "G6", "smt", f"{qname} for {scope} (z3)", 0, res.seconds))
        elif res.status == "unknown":
            unknowns.append(Unknown(rule, "G6", res.name, res.reason, timeout_ms, res.seconds))
        else:
            failed.add(rule)
            m = res.model
            side_name, expected, actual, point = explain(m)
            thread = dict(_PRODUCER if side_name == "producer" else _CONSUMER)
            i = m.get("i", m.get("n", 0))
            cex = Counterexample(
                invariant="G6", rule=rule, engine="smt", program_point="mainloop.pipeline",
                where=str(pipe.loc), iteration=i, stage=i % S, k_block=-1, slot={}, thread=thread,
                register="", smem_offset={}, expected=expected, actual=actual,
                provenance=f"{point}; S={S}, {side_name} start phase {sides[side_name].start_phase}, wrap "
                           f"{sides[side_name].wrap}, carried {sides[side_name].carry_across_tiles}",
                k_tile=m.get("k_tile", -1), params=dict(m),
                chain=(f"iteration i={i}", f"{side_name} PipelineState", "mbarrier wait / stage buffer"),
            )
            msg = f"{qname} fails at {', '.join(f'{k}={v}' for k, v in m.items())}: expected {expected}, {actual}"
            violations.append(Violation(rule, "G6", msg, "CUTLASS PipelineState: stage i mod S, consumer "
                                        "phase starts 0, producer 1, one state for the whole persistent loop",
                                        str(pipe.loc), cex))
    return proofs, violations, unknowns


_PRODUCER, _CONSUMER = PRODUCER_THREAD, CONSUMER_THREAD


# --------------------------------------------------------------------------- G3


def check_k_coverage_smt(program: Program, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Outcome:
    """G3 ``k.coverage`` for symbolic K in [1, 2^bits) (``bits`` = :func:`bound_bits`; vectors of
    ``bits + 10`` bits, so ``k_tiles * tile_k`` cannot overflow).

    The slot map is ``k(j, b, kk) = j * tile_k + b * block_k + kk`` over
    ``j < k_tiles(K)``, ``b < k_blocks``, ``kk < block_k`` (:func:`.semantics.k_of_slot`).
    Queries: *injective* (two distinct slots never sum the same k < K), *covering* (the
    witness ``(k / tile_k, (k % tile_k) / block_k, k % block_k)`` of every k < K is a slot
    summing k) and *in tile* (every slot reads a column of the loaded k-tile). What the slots
    past K read is ``residue.load`` (G8).
    """
    bits = bound_bits(program)
    key = ("k", program.kloop, program.stages, bits, timeout_ms)
    return _memoised(key, lambda: _check_k_coverage_smt(program, bits, timeout_ms))


def _check_k_coverage_smt(program: Program, bits: int, timeout_ms: int) -> Outcome:
    import z3

    kl = program.kloop
    assert kl is not None
    o = Z3Ops(bits + 10)
    K = o.var("K")
    j, b, kk, j2, b2, kk2, k = (o.var(x) for x in ("k_tile", "k_block", "kk", "k_tile2", "k_block2", "kk2", "k"))
    KT = k_tiles_of(o, K, kl.tile_k, kl.rounding)
    base = [z3.ULT(0, K), z3.ULT(K, 1 << bits)]

    def slot(jj: Any, bb: Any, kq: Any) -> list[Any]:
        return [z3.ULT(jj, KT), z3.ULT(bb, kl.k_blocks), z3.ULT(kq, kl.block_k)]

    f = k_of_slot(o, j, b, kk, kl.tile_k, kl.block_k)
    f2 = k_of_slot(o, j2, b2, kk2, kl.tile_k, kl.block_k)
    wj, wb, wk = o.udiv(k, kl.tile_k), o.udiv(o.urem(k, kl.tile_k), kl.block_k), o.urem(k, kl.block_k)
    small = ([_ule(K, 2 * kl.tile_k + 1)],)
    slot_vars = {"K": K, "k_tile": j, "k_block": b, "kk": kk}
    queries = [
        ("injective", "two slots never sum the same k < K", base + slot(j, b, kk) + slot(j2, b2, kk2),
         z3.And(f == f2, z3.ULT(f, K), z3.Or(j != j2, b != b2, kk != kk2)),
         {**slot_vars, "k_tile2": j2, "k_block2": b2, "kk2": kk2}),
        ("covering", "every k < K is summed by a slot", base + [z3.ULT(k, K)],
         z3.Or(z3.Not(z3.And(*slot(wj, wb, wk))), k_of_slot(o, wj, wb, wk, kl.tile_k, kl.block_k) != k),
         {"K": K, "k": k}),
        ("in tile", "every slot reads a column of its loaded k-tile", base + slot(j, b, kk),
         z3.Not(z3.ULT(o.add(o.mul(b, kl.block_k), kk), kl.tile_k)), slot_vars),
    ]
    proofs: list[Proof] = []
    violations: list[Violation] = []
    unknowns: list[Unknown] = []
    rule = "k.coverage"
    for qid, qname, dom, bad, vars_ in queries:
        res = run_query(f"G3 {rule}: {qname}", vars_, dom, bad, timeout_ms=timeout_ms, scopes=small, measure=K)
        if res.status == "proved":
            proofs.append(Proof(rule, "G3", "smt", f"{qname} for all K in [1, 2^{bits}): {kl.rounding}(K/"
                                f"{kl.tile_k}) k-tiles x {kl.k_blocks} k-blocks x {kl.block_k} (z3)", 0, res.seconds))
            continue
        if res.status == "unknown":
            unknowns.append(Unknown(rule, "G3", res.name, res.reason, timeout_ms, res.seconds))
            continue
        violations.append(_k_violation(program, qid, qname, res.model))
        break
    return proofs, violations, unknowns


def _k_violation(program: Program, qid: str, qname: str, m: dict[str, int]) -> Violation:
    from argus_cutlass.verify.absint import accumulator_thread

    kl = program.kloop
    assert kl is not None
    Kv = m["K"]
    kts = k_tiles_of(INT_OPS, Kv, kl.tile_k, kl.rounding)
    if qid == "covering":
        k = m["k"]
        j, b, kk = k // kl.tile_k, (k % kl.tile_k) // kl.block_k, k % kl.block_k
        expected = f"k={k} summed once (k_tile {j}, k_block {b}, slot {kk})"
        actual = (f"k={k} never summed: the loop runs {kts} k-tiles x {kl.k_blocks} k-blocks "
                  f"({kl.rounding}({Kv}/{kl.tile_k}))")
    else:
        j, b, kk = m["k_tile"], m["k_block"], m["kk"]
        k = k_of_slot(INT_OPS, j, b, kk, kl.tile_k, kl.block_k)
        if qid == "injective":
            j2, b2, kk2 = m["k_tile2"], m["k_block2"], m["kk2"]
            expected = f"k={k} summed once"
            actual = (f"k={k} summed twice: (k_tile {j}, k_block {b}, slot {kk}) and "
                      f"(k_tile {j2}, k_block {b2}, slot {kk2})")
        else:
            expected = f"tile column b*{kl.block_k}+kk < tile_k={kl.tile_k}"
            actual = f"k_block {b} slot {kk} reads tile column {b * kl.block_k + kk} of a {kl.tile_k}-column k-tile"
    S = program.stages or 1
    try:
        read = program.read("A")
        la = program.load_into(read.src)
        box = f"TMA k-tile {j} box {la.copy.box} SW{la.copy.swizzle_bytes}"
    except KeyError:
        box = f"TMA k-tile {j}"
    mma = program.mma
    thread, register = accumulator_thread(mma, 0, 0) if mma is not None else (dict(_CONSUMER), "accum[0]")
    chain = (f"gmem A(m=0, k={k})", box, f"smem stage {j % S} column {k - j * kl.tile_k}",
             f"descriptor k_block {b} (+{b * kl.block_k} columns)", f"MMA slot k={kk}")
    cex = Counterexample(
        invariant="G3", rule="k.coverage", engine="smt", program_point="mainloop.k_loop", where=str(kl.loc),
        iteration=j, stage=j % S, k_block=b, slot={"k": kk},
        thread=thread, register=f"{register} (every accumulator sums the same k set)",
        smem_offset={}, expected=expected, actual=actual,
        provenance=f"k loop: {kl.rounding}(K/{kl.tile_k}) k-tiles, {kl.k_blocks} k-blocks of {kl.block_k}, "
                   f"oob_fill={kl.oob_fill}",
        k_tile=j, element={"tensor": "A", "coord": f"(m=0, k={k})"}, chain=chain,
        params={"K": Kv, "k_tiles": kts},
    )
    msg = f"{qname} fails for K={Kv} ({kts} k-tiles): {actual}"
    return Violation("k.coverage", "G3", msg, "k_tiles = ceil_div(K, tile_k) with k_blocks = tile_k / block_k",
                     str(kl.loc), cex)


# --------------------------------------------------------------------------- G1 / G5


def check_operands_smt(program: Program, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Outcome:
    """G5 ``tma.image`` and G1 ``mma.k_agreement`` on bit-vectors (cross-check of the
    enumeration tier through the same semantics functions).

    Per SS operand read: *writes in buffer* and *writes injective* (so, the domain having exactly
    as many points as the buffer, the TMA image is a bijection onto it); *reads in buffer*;
    *tag*: at every read slot (mn, k, s), the TMA writer of the element read (existential
    witness) wrote k-tile s's column k (``k_w + s_w * tile_k == k + s * tile_k``).
    """
    key = ("operands", repr(program.reads), repr(program.loads), repr(program.tensors), timeout_ms)
    return _memoised(key, lambda: _check_operands_smt(program, timeout_ms))


def _check_operands_smt(program: Program, timeout_ms: int) -> Outcome:
    import z3

    from argus_cutlass.verify.absint import view_layout

    proofs: list[Proof] = []
    violations: list[Violation] = []
    unknowns: list[Unknown] = []
    o = Z3Ops(32)
    mma = program.mma
    for read in program.reads:
        if read.view is None or mma is None or read.name not in (mma.a, mma.b):
            continue
        load = program.load_into(read.src)
        t = program.tensor(load.dst)
        S = int(t.shape[2]) if len(t.shape) >= 3 else 1
        cells = load.tile_mn * load.tile_k * S
        lay = view_layout(read.view)
        v = {x: o.var(f"{read.operand}_{x}") for x in ("mn", "k", "s", "mn2", "k2", "s2", "rmn", "rk", "rs")}

        def wdom(mn: Any, k: Any, s: Any, load: Any = load, S: int = S) -> list[Any]:
            return [z3.ULT(mn, load.tile_mn), z3.ULT(k, load.tile_k), z3.ULT(s, S)]

        w1 = tma_box_offset(o, load, v["mn"], v["k"], v["s"], t.base_bytes, t.elem_bytes)
        w2 = tma_box_offset(o, load, v["mn2"], v["k2"], v["s2"], t.base_bytes, t.elem_bytes)
        r = layout_offset(o, lay, v["rmn"], v["rk"], v["rs"])
        rdom = [z3.ULT(v["rmn"], read.tile_mn), z3.ULT(v["rk"], read.tile_k), z3.ULT(v["rs"], S)]
        op = read.operand
        queries = [
            ("tma.image", "G5", f"TMA {op} writes inside its buffer", wdom(v["mn"], v["k"], v["s"]),
             z3.Not(z3.ULT(w1, cells))),
            ("tma.image", "G5", f"TMA {op} writes injective",
             wdom(v["mn"], v["k"], v["s"]) + wdom(v["mn2"], v["k2"], v["s2"]),
             z3.And(w1 == w2, z3.Or(v["mn"] != v["mn2"], v["k"] != v["k2"], v["s"] != v["s2"]))),
            ("mma.k_agreement", "G1", f"GMMA {op} reads inside its buffer", rdom, z3.Not(z3.ULT(r, cells))),
            ("mma.k_agreement", "G1", f"GMMA {op} reads the k its slot sums", rdom + wdom(v["mn"], v["k"], v["s"]),
             z3.And(w1 == r, o.add(v["k"], o.mul(v["s"], load.tile_k))
                    != o.add(v["rk"], o.mul(v["rs"], load.tile_k)))),
        ]

        def size(mn: Any, k: Any, s: Any, load: Any = load, read: Any = read) -> Any:
            return o.add(o.mul(o.add(o.mul(s, load.tile_k), k), read.tile_mn), mn)

        for rule, inv, qname, dom, bad in queries:
            if "reads" in qname:
                scope, measure = ([v["rs"] == 0],), size(v["rmn"], v["rk"], v["rs"])
            else:
                scope, measure = ([v["s"] == 0],), size(v["mn"], v["k"], v["s"])
            res = run_query(f"{inv} {rule}: {qname}", v, dom, bad, timeout_ms=timeout_ms, scopes=scope,
                            measure=measure)
            if res.status == "proved":
                proofs.append(Proof(rule, inv, "smt", f"{qname}: all {read.tile_mn}x{read.tile_k}x{S} slots (z3)",
                                    0, res.seconds))
            elif res.status == "unknown":
                unknowns.append(Unknown(rule, inv, res.name, res.reason, timeout_ms, res.seconds))
            else:
                m = dict(res.model)
                violations.append(_operand_violation(program, read, load, rule, inv, qname, m, cells, S))
                break
    return proofs, violations, unknowns


def _operand_violation(program: Program, read: Any, load: Any, rule: str, inv: str, qname: str,
                       m: dict[str, int], cells: int, S: int) -> Violation:
    """A violation of the operand cross-check, with the model as a counterexample record."""
    from argus_cutlass.verify.absint import accumulator_thread, view_layout

    t = program.tensor(load.dst)
    op = read.operand
    lay = view_layout(read.view)
    w = tma_box_offset(INT_OPS, load, m["mn"], m["k"], m["s"], t.base_bytes, t.elem_bytes)
    if "reads" in qname:
        mn, k, s = m["rmn"], m["rk"], m["rs"]
        off = int(lay(mn, k, s))
        if "inside" in qname:
            expected, actual = f"read offset < {cells}", f"GMMA {op} reads smem elem {off}, outside the buffer"
        else:
            expected = f"{op} element with k={k + s * load.tile_k} (slot k {k} of k-tile {s})"
            actual = (f"smem elem {off} holds {op}(mn={m['mn']}, k={m['k'] + m['s'] * load.tile_k}) written by "
                      f"the TMA of k-tile {m['s']}")
    else:
        mn, k, s = m["mn"], m["k"], m["s"]
        off = w
        if "inside" in qname:
            expected, actual = f"write offset < {cells}", f"TMA writes {op}(mn={mn}, k={k}) to smem elem {off}"
        else:
            expected = "one TMA write per smem element"
            actual = (f"{op}(mn={mn}, k={k}, stage {s}) and {op}(mn={m['mn2']}, k={m['k2']}, stage {m['s2']}) "
                      f"both land at smem elem {off}")
    sw = lay.describe() if hasattr(lay, "describe") else str(lay)
    thread, register = accumulator_thread(program.mma, mn if op == "A" else 0, mn if op == "B" else 0)
    cex = Counterexample(
        invariant=inv, rule=rule, engine="smt", program_point="mainloop.gemm", where=str(read.loc),
        iteration=s, stage=s, k_block=k // read.op.k, slot={"mn": mn, "k": k % read.op.k}, thread=thread,
        register=register, smem_offset={op: int(off)}, expected=expected, actual=actual,
        provenance=f"TMA {op} box {load.copy.box} SW{load.copy.swizzle_bytes}; GMMA {op} reads {sw}",
        k_tile=s, element={"tensor": op, "coord": f"(mn={mn}, k={k + s * load.tile_k})"},
        chain=(f"gmem {op}(mn={m['mn']}, k={m['k'] + m['s'] * load.tile_k})",
               f"TMA box {load.copy.box} SW{load.copy.swizzle_bytes}",
               f"smem byte {t.base_bytes + int(off) * t.elem_bytes:#x}", f"descriptor {sw}",
               f"MMA slot {op}(mn={mn}, k={k})"),
        params={"stages": S},
    )
    msg = f"{qname} fails (z3 model): {actual}"
    return Violation(rule, inv, msg, "build the TMA box and the descriptor from the same smem atom",
                     str(read.loc), cex)
