"""Named barriers (``barrier.named``, B1) and turn orders (``turn.order``, B2).

The correct GEMM programs (cooperative, ping-pong) pass; planted mistakes in the program (barrier
id reuse, wrong thread counts, reserved or out-of-range ids, a missing barrier, a turn order whose
first group is wrong, whose points share barriers, whose barrier is the epilogue's, or with three
groups) are each caught by the named rule with a counterexample record.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from argus_cutlass.errors import DslError

from argus_cutlass.dsl.ir import NamedBarrier, SourceLoc
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify.barriers import (
    INV_NAMED,
    INV_TURN,
    RULE_NAMED,
    RULE_TURN,
    check_named_barriers,
    check_turn_orders,
)
from argus_cutlass.verify.catalogue import invariant_of


@pytest.fixture(scope="module")
def coop():
    return build_program(GemmConfig(schedule="cooperative"))


@pytest.fixture(scope="module")
def pingpong():
    return build_program(GemmConfig(schedule="pingpong", tile_m=64, epi_m=64))


def _violations(check, program, rule):
    proofs, violations = check(program)
    assert not proofs, [p.summary for p in proofs]
    assert violations and all(v.rule == rule for v in violations), [v.format() for v in violations]
    for v in violations:
        assert v.counterexample is not None and v.counterexample.rule == rule
        assert v.counterexample.expected and v.counterexample.actual
    return violations


def test_catalogue_lists_the_rules():
    assert invariant_of(RULE_NAMED) == INV_NAMED == "B1"
    assert invariant_of(RULE_TURN) == INV_TURN == "B2"


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_correct_gemm_programs_pass(schedule, coop, pingpong):
    p = coop if schedule == "cooperative" else pingpong
    proofs, violations = check_named_barriers(p)
    assert violations == [] and [x.rule for x in proofs] == [RULE_NAMED]
    proofs, violations = check_turn_orders(p)
    assert violations == []
    assert [x.rule for x in proofs] == ([RULE_TURN] if p.orders else [])


def test_pingpong_proof_states_its_scope(pingpong):
    (proof,), _ = check_turn_orders(pingpong)
    assert proof.engine == "enum" and proof.points > 100
    assert "(0, 0)..(4, 3)" in proof.summary and "no deadlock" in proof.summary


def test_every_gemm_space_point_kind_passes():
    """A few more shapes: 128-row ping-pong (two M repetitions per warpgroup), a 1x1 cluster."""
    for cfg in (GemmConfig(schedule="pingpong"), GemmConfig(schedule="pingpong", cluster_m=1),
                GemmConfig(cluster_m=1, tile_n=128)):
        p = build_program(cfg)
        for check in (check_named_barriers, check_turn_orders):
            assert check(p)[1] == [], check.__name__


# ---------------------------------------------------------------------------------- barrier.named


def test_barrier_id_reuse_caught(pingpong):
    bad = pingpong.replace_node("barrier", "epilogue.1", id=pingpong.barrier("epilogue").id)
    (v,) = _violations(check_named_barriers, bad, RULE_NAMED)
    assert "id 8 is also used by 'epilogue'" in v.message
    assert "['epilogue', 'epilogue.1']" in v.counterexample.actual


def test_epilogue_thread_count_caught(coop):
    bad = coop.replace_node("barrier", "epilogue", threads=128)
    (v,) = _violations(check_named_barriers, bad, RULE_NAMED)
    assert "256 reach it" in v.message and v.counterexample.params == {"atoms_m": 2}


def test_pingpong_epilogue_counts_one_warpgroup(pingpong):
    bad = pingpong.replace_node("barrier", "epilogue.1", threads=256)
    (v,) = _violations(check_named_barriers, bad, RULE_NAMED)
    assert "'epilogue.1'" in v.message and "never completes" in v.message


@pytest.mark.parametrize("field,value,text", [
    ("id", 0, "__syncthreads"),
    ("id", 16, "not a hardware barrier"),
    ("id", "8", "not a hardware barrier"),
    ("threads", 100, "multiple of the warp size"),
    ("threads", 0, "multiple of the warp size"),
    ("threads", 512, "the CTA launches 384"),
])
def test_malformed_barrier_fields_caught(coop, field, value, text):
    bad = coop.replace_node("barrier", "epilogue", **{field: value})
    violations = _violations(check_named_barriers, bad, RULE_NAMED)
    assert any(text in v.message for v in violations), [v.message for v in violations]


def test_streamk_reserved_ids():
    p = build_program(GemmConfig(scheduler="streamk"))
    assert check_named_barriers(p)[1] == []
    bad = p.replace_node("barrier", "epilogue", id=4)
    (v,) = _violations(check_named_barriers, bad, RULE_NAMED)
    assert "stream-K fixup" in v.message
    # the same id under the persistent scheduler is not reserved (no false alarm)
    ok = build_program(GemmConfig()).replace_node("barrier", "epilogue", id=4)
    assert check_named_barriers(ok)[1] == []


def test_missing_barrier_reference_caught(coop):
    bad = coop.replace_node("staging", barrier="nope")
    violations = _violations(check_named_barriers, bad, RULE_NAMED)
    assert any("'nope', which is not declared" in v.message for v in violations)


def test_pingpong_needs_the_second_epilogue_barrier(pingpong):
    bad = dataclasses.replace(pingpong, barriers=tuple(b for b in pingpong.barriers if b.name != "epilogue.1"))
    violations = _violations(check_named_barriers, bad, RULE_NAMED)
    assert any("'epilogue.1'" in v.message for v in violations)


# ------------------------------------------------------------------------------------- turn.order


def test_first_group_wrong_deadlocks(pingpong):
    bad = pingpong.replace_node("order", "pingpong", first=1)
    (v,) = _violations(check_turn_orders, bad, RULE_TURN)
    cex = v.counterexample
    assert cex.engine == "enum" and "deadlock" in v.message
    # group 0 holds the CTA's first unit (and one tile more): it waits for a turn group 1 never gives
    assert cex.params == {"tiles_group0": 1, "tiles_group1": 0}
    assert cex.thread["warpgroup"] == 0 and cex.thread["threadIdx"] == 128
    assert "waits forever at bar.sync order.mainloop.0" in cex.actual
    assert cex.trace and cex.trace[-1].startswith("WG0 tile 0: bar.sync order.mainloop.0")


def test_point_sharing_another_points_barriers(pingpong):
    rows = pingpong.orders[0].barriers
    bad = pingpong.replace_node("order", "pingpong", barriers=(rows[0], rows[0]))
    violations = _violations(check_turn_orders, bad, RULE_TURN)
    assert any("serves (point 'epilogue', group 0) and (point 'mainloop', group 0)" in v.message for v in violations)
    run = [v for v in violations if v.counterexample.engine == "enum"]
    assert run and "re-arrives" in run[0].message
    # the shortest run: group 1's two start-up arrivals hit the same barrier before it resets
    assert len(run[0].counterexample.trace) == 2


def test_two_groups_sharing_one_barrier(pingpong):
    rows = pingpong.orders[0].barriers
    bad = pingpong.replace_node("order", "pingpong", barriers=((rows[0][0], rows[0][0]), rows[1]))
    violations = _violations(check_turn_orders, bad, RULE_TURN)
    assert any(v.counterexample.engine == "enum" for v in violations)


def test_order_barrier_is_the_epilogue_barrier(pingpong):
    rows = pingpong.orders[0].barriers
    bad = pingpong.replace_node("order", "pingpong", barriers=(rows[0], (rows[1][0], "epilogue.1")))
    violations = _violations(check_turn_orders, bad, RULE_TURN)
    assert any("is the epilogue's barrier 'epilogue.1'" in v.message for v in violations)
    assert any(v.counterexample.engine == "enum" for v in violations)


@pytest.mark.parametrize("threads,kind", [(128, "alternate"), (384, "deadlock")])
def test_order_barrier_thread_count_caught(pingpong, threads, kind):
    bad = pingpong.replace_node("barrier", "order.mainloop.1", threads=threads)
    violations = _violations(check_turn_orders, bad, RULE_TURN)
    assert any("each phase has 256 participants" in v.message for v in violations)
    (run,) = [v for v in violations if v.counterexample.engine == "enum"]
    assert kind in run.message


def test_order_barrier_sharing_an_id(pingpong):
    """Two order barriers on one hardware id are one barrier: the model keys barriers by id."""
    bad = pingpong.replace_node("barrier", "order.epilogue.0", id=pingpong.barrier("order.mainloop.0").id)
    violations = _violations(check_turn_orders, bad, RULE_TURN)
    assert any("share hardware id" in v.message for v in violations)
    assert any(v.counterexample.engine == "enum" for v in violations)
    assert check_named_barriers(bad)[1]  # and the id rule sees it too


@pytest.mark.parametrize("rows", [
    (("order.mainloop.1", "order.mainloop.0"), ("order.epilogue.0", "order.epilogue.1")),
    (("order.mainloop.0", "order.epilogue.1"), ("order.epilogue.0", "order.mainloop.1")),
])
def test_barriers_swapped_is_a_renaming(pingpong, rows):
    """Swapping which declared barrier serves which (point, group) -- within a point or across
    points -- keeps one barrier per (point, group): every barrier is still synced by one group and
    arrived at by the other, so the kernel is the same up to names. Proved, not a false alarm."""
    swapped = pingpong.replace_node("order", "pingpong", barriers=rows)
    proofs, violations = check_turn_orders(swapped)
    assert violations == [] and [p.rule for p in proofs] == [RULE_TURN]


def test_three_groups_take_turns_from_the_documented_start(pingpong):
    """Three groups (attention's 192-row tiles): only the group before ``first`` pre-arrives on the
    first group's barrier (``TurnOrder``'s protocol, printed by the attention template), so each
    256-thread phase has one syncing and one arriving group and the chain never stalls. A barrier
    shared by two groups breaks it, and only the interleavings show it."""
    names = tuple(f"t{g}" for g in range(3))
    bars = tuple(NamedBarrier(n, 10 + g, 256, SourceLoc("t", 1)) for g, n in enumerate(names))
    p = dataclasses.replace(pingpong, barriers=pingpong.barriers[:2] + bars,
                            roles=tuple(dataclasses.replace(r, warpgroups=(1, 2, 3)) if r.kind == "consumer" else r
                                        for r in pingpong.roles),
                            launch=dataclasses.replace(pingpong.launch, threads=512),
                            schedule=dataclasses.replace(pingpong.schedule, consumer_stride=3))
    p = p.replace_node("order", "pingpong", groups=3, points=("mainloop",), barriers=(names,))
    proofs, violations = check_turn_orders(p)
    assert violations == [] and [x.rule for x in proofs] == [RULE_TURN]
    shared = p.replace_node("order", "pingpong", barriers=(("t0", "t0", "t2"),))
    assert _violations(check_turn_orders, shared, RULE_TURN)


@pytest.mark.parametrize("changes", [
    {"groups": "two"},
    {"groups": 0},
    {"first": 5},
    {"barriers": (("order.mainloop.0",),)},
    {"barriers": "order.mainloop.0"},
    {"barriers": (("x", "y"), ("order.epilogue.0", "order.epilogue.1"))},
    {"points": None},
])
def test_malformed_turn_order_is_a_violation(pingpong, changes):
    # the DSL refuses the edit at its source line; a node that bypasses the DSL (built field by
    # field) is still a violation of the check, never an exception
    with pytest.raises(DslError):
        pingpong.replace_node("order", "pingpong", **changes)
    node = copy.copy(pingpong.orders[0])
    for k, v in changes.items():
        object.__setattr__(node, k, v)
    bad = dataclasses.replace(pingpong, orders=(node,))
    violations = _violations(check_turn_orders, bad, RULE_TURN)
    assert violations


def test_checks_never_raise_on_garbage(coop):
    bad = coop.replace_node("barrier", "epilogue", threads=None, id=None)
    assert check_named_barriers(bad)[1]
    bad = dataclasses.replace(coop, barriers=(None,))
    (v,) = check_named_barriers(bad)[1]
    assert v.message.startswith("malformed program")
