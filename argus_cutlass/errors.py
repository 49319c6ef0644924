"""Every exception argus_cutlass raises for a user mistake or an environment problem.

Each class carries a ``rule`` (a stable, greppable name such as ``tma.box_extent``),
a message that names the input and the numbers, and an optional ``hint``.
``user_error`` tells the CLI to print the message alone, without a traceback.
"""

from __future__ import annotations


class ArgusError(Exception):
    """Base class. ``str(err)`` is the full user-facing message."""

    user_error: bool = True

    def __init__(self, rule: str, message: str, hint: str | None = None) -> None:
        self.rule = rule
        self.message = message
        self.hint = hint
        text = f"[{rule}] {message}"
        if hint:
            text += f"\n  hint: {hint}"
        super().__init__(text)


class ConfigError(ArgusError):
    """A kernel configuration cannot be instantiated (bad tile, cluster, stages...).

    ``fields`` maps the configuration fields the error is about to their values, the field at
    fault first (empty when it is about no one field, e.g. a problem that disagrees with the
    configuration); ``model`` is the configuration class's name and ``text`` the rule broken,
    without the field prefix (both ``""`` without fields). Build one with :meth:`of_fields`.
    """

    def __init__(self, rule: str, message: str, hint: str | None = None, *,
                 fields: dict[str, object] | None = None, model: str = "", text: str = "") -> None:
        self.fields = dict(fields or {})
        self.model = model
        self.text = text
        super().__init__(rule, message, hint)

    @classmethod
    def of_fields(cls, rule: str, model: str, fields: dict[str, object], text: str,
                  hint: str | None = None) -> ConfigError:
        """The error of configuration fields no program can be built from: the message is
        ``"<model> <field>=<value> (with <other>=<value>, ...): <text>"``, the first of ``fields``
        being the one at fault and the others what the rule reads beside it.

        >>> str(ConfigError.of_fields("config.tile_n", "GemmConfig", {"tile_n": 1, "cluster_m": 2}, "too narrow"))
        '[config.tile_n] GemmConfig tile_n=1 (with cluster_m=2): too narrow'
        """
        items = [f"{k}={v!r}" for k, v in fields.items()]
        head = f"{model} {items[0]}" if items else model
        if len(items) > 1:
            head += f" (with {', '.join(items[1:])})"
        return cls(rule, f"{head}: {text}", hint, fields=fields, model=model, text=text)


class DslError(ArgusError):
    """A malformed DSL program (an unknown tag field, an assertion over a value that carries no
    tag, a layout whose size disagrees with its tensor...). The message starts with the
    ``file:line`` of the offending DSL statement."""


class ProblemError(ArgusError):
    """A problem description is invalid: sizes, dtypes, layouts, leading dimensions, pointers."""

    @staticmethod
    def raise_all(errs: list[ProblemError], subject: str) -> None:
        """Raise nothing for no error, the error itself for one, else the first one's rule with a
        message listing all of them (``subject``: what they are about, e.g. the problem's repr)."""
        if not errs:
            return
        if len(errs) == 1:
            raise errs[0]
        lines = "\n".join(f"  - {e}" for e in errs)
        raise ProblemError(errs[0].rule, f"{len(errs)} problems with {subject}:\n{lines}")


class VerificationError(ArgusError):
    """The verifier rejected a program; ``.report`` holds every violation."""

    def __init__(self, report) -> None:  # noqa: ANN001 - VerificationReport
        self.report = report
        first = report.violations[0]
        more = len(report.violations) - 1
        msg = report.format()
        super().__init__(first.rule, msg if more else first.message)


class UnprovedError(ArgusError):
    """The verifier found no violation but the report is not ``complete``: obligations came back
    ``unknown`` (an SMT timeout, a case outside what an engine covers; rule ``verify.unknown``) or
    were left undecided, with no proof, violation, unknown or skip recorded (a verifier defect; rule
    ``verify.undecided``, which takes precedence). Neither is ``proved``: the orchestrator refuses to
    render such a program unless the caller allows it (``allow_unknown=True``; CLI
    ``--allow-unknown``). Obligations deliberately skipped (the SMT tier off) do not raise this.
    ``.report`` holds the report; the message names every obligation that was not proved."""

    def __init__(self, report) -> None:  # noqa: ANN001 - VerificationReport
        self.report = report
        undecided = list(report.undecided)
        items = [unknown_text(u) for u in report.unknowns] + [undecided_text(o) for o in undecided]
        shown = "\n".join(f"  - {t}" for t in items[:12])
        more = f"\n  ... and {len(items) - 12} more" if len(items) > 12 else ""
        if undecided:
            rule = "verify.undecided"
            hint = ("a verifier defect: the rule registered its obligation and reported nothing; fix the check "
                    "(every obligation must end proved, violated, unknown or skipped), or pass --allow-unknown "
                    "(allow_unknown=True) to render it anyway; the .cu header then lists what was not proved")
        else:
            rule = "verify.unknown"
            hint = ("raise ARGUS_SMT_TIMEOUT_MS (or --smt-timeout-ms) for timeouts, or pass --allow-unknown "
                    "(allow_unknown=True) to render it anyway; the .cu header then lists what was not proved")
        super().__init__(
            rule, f"{report.kernel}: no violation found, but {len(items)} obligation(s) not proved:\n{shown}{more}",
            hint,
        )


def unknown_text(u) -> str:  # noqa: ANN001 - argus_cutlass.verify.report.Unknown
    """One line naming an undecided obligation: ``"<invariant> <rule>: <query> (<reason>)"``."""
    head = " ".join(x for x in (getattr(u, "invariant", ""), getattr(u, "rule", "")) if x)
    query = getattr(u, "query", "") or getattr(u, "description", "")
    query = query.removeprefix(f"{head}: ") if head else query
    reason = getattr(u, "reason", "")
    return f"{head}: {query}" + (f" ({reason})" if reason else "")


def undecided_text(o) -> str:  # noqa: ANN001 - argus_cutlass.verify.report.Obligation
    """One line naming an obligation the verifier left without any outcome:
    ``"<invariant> <rule>: <description> (undecided: no proof, violation, unknown or skip recorded)"``."""
    return (f"{o.invariant} {o.rule}: {o.description} (undecided: no proof, violation, unknown or skip "
            "recorded)")


class ToolchainError(ArgusError):
    """nvcc, the CUTLASS headers or the CUDA driver are missing or unusable."""


class CompileError(ArgusError):
    """nvcc or ptxas failed (or warned C7510); the message holds the log's relevant lines."""

    def __init__(self, rule: str, message: str, log: str = "", hint: str | None = None) -> None:
        self.log = log
        super().__init__(rule, message, hint)


class DeviceError(ArgusError):
    """No usable GPU, the wrong architecture, or a CUDA runtime call failed."""


class LaunchError(ArgusError):
    """A built kernel refused the arguments (can_implement) or its launch failed."""


class NotPrecompiledError(ArgusError):
    """A call needs a kernel that is not built in this process while building is not allowed
    (inside a CUDA graph capture: an nvcc run there would stall the capture, and a first use
    there cannot load a library). Build it first with :func:`argus_cutlass.torch.precompile`."""
