"""The verifier's run bookkeeping, shared by every family's ``verify_<family>``: :class:`Run`
collects proofs, violations, unknowns and skipped checks per tier and turns an exception inside a
check into a violation of the check's rule; :func:`report` builds the :class:`VerificationReport`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from argus_cutlass.verify.catalogue import invariant_of
from argus_cutlass.verify.report import Obligation, Proof, Skipped, Unknown, VerificationReport, Violation

#: the reason of a Skipped record of the SMT tier turned off (``argus_cutlass.generate.verify`` says so
#: instead when z3-solver is missing)
SMT_OFF = "SMT tier off (smt=False, --no-smt)"


class Run:
    """Collects proofs, violations, unknowns and skipped checks, and the wall time per tier. Every
    check runs through :meth:`add`, which turns an exception inside a check into a violation of the
    check's rule (the verifier never raises on a program it is given); a check deliberately not run
    is recorded with :meth:`skip`."""

    def __init__(self) -> None:
        self.proofs: list[Proof] = []
        self.violations: list[Violation] = []
        self.unknowns: list[Unknown] = []
        self.skipped: list[Skipped] = []
        self.tier: dict[str, float] = {"arith": 0.0, "enum": 0.0, "smt": 0.0}

    def add(self, tier: str, rule: str, fn: Callable[..., Any], *args: Any) -> tuple[list[Proof], list[Violation]]:
        import numpy as np

        t0 = time.perf_counter()
        try:
            with np.errstate(divide="raise", invalid="raise"):
                out = fn(*args)
        except Exception as exc:  # noqa: BLE001 - a program the check cannot run on is a violation
            self.tier[tier] += time.perf_counter() - t0
            inv = invariant_of(rule)
            v = Violation(rule, inv if inv != "?" else "DSL",
                          f"the {rule} check cannot run on this program ({fn.__name__}): {type(exc).__name__}: {exc}",
                          "the program is malformed where this rule looks; fix the node it names")
            self.violations.append(v)
            return [], [v]
        dt = time.perf_counter() - t0
        self.tier[tier] += dt
        p, v = list(out[0]), list(out[1])
        if len(out) > 2:
            self.unknowns += out[2]
        untimed = [x for x in p if not x.seconds]
        if untimed:
            share = dt / len(p)
            p = [dataclasses.replace(x, seconds=share) if not x.seconds else x for x in p]
        self.proofs += p
        self.violations += v
        return p, v

    def skip(self, rule: str, check: str, reason: str = SMT_OFF, invariant: str | None = None) -> None:
        """Record that ``rule``'s ``check`` was deliberately not run, and why (a
        :class:`~argus_cutlass.verify.report.Skipped`: never a proof); ``invariant`` defaults to
        the catalogue's (:func:`~argus_cutlass.verify.catalogue.invariant_of`)."""
        self.skipped.append(Skipped(rule, invariant or invariant_of(rule), check, reason))


def node_text(node: Any) -> str:
    """``str(node)``, or its repr when a malformed field breaks ``__str__``."""
    try:
        return str(node)
    except Exception:  # noqa: BLE001
        return repr(node)


def start(program: Any, smt: bool) -> tuple[str, list[Obligation], Run]:
    """The common opening of every ``verify_<family>``: the program's name (its repr's name when a
    malformed node breaks the kernel name), z3 required when ``smt``, and the relation and reference
    checks of the DSL; returns ``(name, obligations, run)``.

    Raises:
        argus_cutlass.errors.ToolchainError: ``smt`` is asked for and z3 is not installed.
    """
    from argus_cutlass.verify.relations import (
        check_references,
        check_relations,
        check_required_assertions,
        check_required_relations,
        check_smem_disjoint,
    )

    try:
        name = program.kernel_name()
    except Exception:  # noqa: BLE001 - an unprintable node still gets a report
        name = str(getattr(program, "name", "program"))
    if smt:
        from argus_cutlass.verify import smt as smt_tier

        smt_tier.require_z3()
    obligations = [Obligation(rel.rule, rel.invariant, node_text(rel), str(rel.loc)) for rel in program.relations]
    run = Run()
    run.add("arith", "dsl.relation", check_relations, program)
    run.add("arith", "dsl.unknown_ref", check_references, program)
    run.add("arith", "smem.disjoint", check_smem_disjoint, program)
    run.add("arith", "mma.operand_identity", check_required_assertions, program)
    run.add("arith", "dsl.relation", check_required_relations, program)
    return name, obligations, run


def report(name: str, obligations: list[Obligation], run: Run, notes: list[str], t0: float) -> VerificationReport:
    """The :class:`VerificationReport` of a finished run (``t0``: its start, ``time.perf_counter``)."""
    return VerificationReport(name, tuple(obligations), tuple(run.proofs), tuple(run.violations),
                              time.perf_counter() - t0, tuple(notes), tuple(run.unknowns),
                              {k: v for k, v in run.tier.items() if v}, tuple(run.skipped))
