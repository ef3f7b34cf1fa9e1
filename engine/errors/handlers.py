"""``get_error_handler``: the factory ``record`` uses when no handler is given (as in torch)."""

from __future__ import annotations

from .error_handler import ErrorHandler

__all__ = ["get_error_handler"]


def get_error_handler() -> ErrorHandler:
    """A new default ``ErrorHandler``."""
    return ErrorHandler()
