"""Every error the project raises on purpose, under one base.

Interfaces map the kind to an answer (CLI exit code, HTTP status) in one place each:

    BadInput             the user's input or configuration is wrong        CLI 2, HTTP 422
    SourceError          a source of evidence failed                       coverage record; scoping: CLI 2
    TransientSourceError ... in a way worth retrying (down, slow, 5xx)     coverage record; scoping: CLI 5
    Unreachable          a dependency did not answer (Prefect, a service)  CLI 5
    NotStored            a diagnosis was computed but not written          CLI 3
    ActionError          an action sink failed (transient: retry)          the action's recorded outcome
    anything else        a bug                                             CLI 1, HTTP 500

(CLI 4, checks that ran and failed, is an answer, not an error: each command returns it.)
"""

from __future__ import annotations

from typing import Any


def first_line(exc: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has none."""
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


class AttributionError(Exception):
    """Base of every error this project raises on purpose."""


class BadInput(AttributionError, ValueError):
    """The input (a bundle, a request, a rule file, the configuration) is wrong. The message is one
    line naming what and where."""


class SourceError(AttributionError):
    """A source of evidence failed. `transient` errors (transport errors, timeouts, 429, 5xx) are
    worth retrying; `status` is the coverage status to record when every retry failed."""

    transient = False

    def __init__(self, message: str, status: str = "error", connector: str | None = None):
        super().__init__(message)
        self.status = status
        self.connector = connector


class TransientSourceError(SourceError):
    """A source failed in a way worth retrying."""

    transient = True


class Unreachable(AttributionError):
    """A dependency (the Prefect server, a remote `attribution serve`, a scheduler's API) did not
    answer: nothing is wrong with the input, and the same command may work once it is back."""


class NotStored(AttributionError):
    """A diagnosis was computed but could not be written where it was asked to go; the diagnosis
    travels with the error so that it is not lost (the CLI prints it)."""

    def __init__(self, message: str, diagnosis: Any = None):
        super().__init__(message)
        self.diagnosis: Any = diagnosis  # a contracts.models.Diagnosis


class ActionError(AttributionError):
    """An action sink could not do what it was asked: its endpoint refused or was not reached.
    `transient` ones (transport errors, timeouts, 429, 5xx) are tried again; the last one is the
    action's recorded outcome, never the diagnosis' failure."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class ActionSkipped(ActionError):
    """A sink found a reason not to act (the node was drained by someone else, the taint is gone):
    recorded as skipped, with the reason."""
