"""Errors of the ``wds`` package.

    FuncsionError                      (funcsion_errors: the root of every funcsion error)
    └── WDSError
        └── WDSValidationError         carries every ``Issue`` found in one file

Each ``Issue`` names the file, the JSON path, what is wrong and how to fix it.
``wds`` re-exports the root, so ``from wds import FuncsionError`` keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass

from funcsion_errors import FuncsionError

__all__ = ["FuncsionError", "WDSError", "WDSValidationError", "Issue"]


class WDSError(FuncsionError):
    """A workflow description could not be used."""


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem in a WDS file."""

    source: str
    path: str
    message: str
    fix: str = ""
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}:{self.column}"
        text = f"{where}: {self.path}: {self.message}"
        if self.fix:
            text += f"{'' if self.message.endswith(('.', '?', '!')) else '.'} Fix: {self.fix}"
        return text


class WDSValidationError(WDSError):
    """Raised with every issue found, not just the first; one issue reads as one line."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = list(issues)
        n = len(self.issues)
        if n == 1:  # one line: what the CLI prints after its name
            super().__init__(f"1 error in workflow description: {self.issues[0]}")
        else:
            super().__init__(f"{n} errors in workflow description:\n" + "\n".join(f"  - {i}" for i in self.issues))
