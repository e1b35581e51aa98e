"""Connectors: get an attempt's evidence from a source into the staging database."""


class TransientSourceError(Exception):
    """A source failed in a way worth retrying (transport error, 429, 5xx).

    `status` is the coverage status to record if every retry fails ('error' or 'timeout').
    """

    def __init__(self, message: str, status: str = "error"):
        super().__init__(message)
        self.status = status
