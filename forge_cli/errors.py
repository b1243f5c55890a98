"""Errors a user can cause: printed as one clear message, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad input, missing prerequisite).

    ``fix`` is printed under the message; ``exit_code`` is the process exit status.
    """

    def __init__(self, message: str, fix: str | None = None, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.exit_code = exit_code


class ConfigError(UserError):
    """The composed experiment is invalid; ``problems`` lists every error found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid experiment configuration", exit_code=2)
        self.problems = problems

    def __str__(self) -> str:
        return "\n".join(self.problems)
