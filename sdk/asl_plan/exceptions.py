"""Errors of the state-machine planner.

    FuncsionError                 (funcsion_errors)
    └── AslError                  a state machine definition the planner cannot read

An ``AslError`` names the JSON path of the problem in the definition and the fix, in
one line (``$.States.Fetch.Next: 'Sumarize' names no state ...; name one of ...``);
``funcsion offload plan`` prints it and exits 2. A definition the planner reads but
whose data flow it cannot follow is not an error: the plan says so per state.
"""

from __future__ import annotations

from funcsion_errors import FuncsionError

__all__ = ["AslError"]


class AslError(FuncsionError):
    """A state machine definition that is not valid Amazon States Language."""

    def __init__(self, where: str, problem: str, fix: str) -> None:
        self.where, self.problem, self.fix = where, problem, fix
        super().__init__(f"{where}: {problem}; {fix}")
