"""Small-scope state exploration shared by the protocol checkers (mbarrier pipelines, turn orders)."""

from __future__ import annotations

from typing import Any


def path_to(parent: dict[Any, tuple[Any, str] | None], state: Any) -> tuple[str, ...]:
    """The steps from the initial state to ``state`` in a breadth-first search whose ``parent`` map
    sends each reached state to ``(previous state, step label)`` (``None`` for the initial state).

    >>> path_to({"a": None, "b": ("a", "x"), "c": ("b", "y")}, "c")
    ('x', 'y')
    """
    out = []
    while parent[state] is not None:
        state, step = parent[state]  # type: ignore[misc]
        out.append(step)
    return tuple(reversed(out))
