"""``ErrorHandler``: writes a rank's uncaught exception to TORCHELASTIC_ERROR_FILE (torch's schema).

Same methods as torch's, so subclasses written for torch work here. Differences, all fixes:
the file is written atomically (temporary file + rename); the traceback comes from the
exception given, not from ``sys.exc_info()`` (so it is right outside an ``except`` block,
where torch writes "NoneType: None"); a write that fails is a warning, not a second exception
on top of the real one; ``dump_error_file`` copes with an unreadable child file.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import traceback
import warnings
from typing import Any, Optional

from .. import clock
from .error_file import read_error_file, write_error_file

__all__ = ["ErrorHandler"]

logger = logging.getLogger(__name__)


class ErrorHandler:
    """Records exceptions into the error file named by ``TORCHELASTIC_ERROR_FILE``.

    Subclass and override ``initialize()`` / ``record_exception()`` to customise, as in torch.
    """

    def _get_error_file_path(self) -> Optional[str]:
        """The file to write, or None to only log (the variable is unset or empty)."""
        return os.environ.get("TORCHELASTIC_ERROR_FILE", None)

    def initialize(self) -> None:
        """Prepare to capture errors: enables faulthandler so fatal signals dump Python stacks."""
        try:
            faulthandler.enable(all_threads=True)
        except Exception as e:  # e.g. stderr closed: not worth failing the rank for
            warnings.warn(f"Unable to enable fault handler. {type(e).__name__}: {e}", stacklevel=2)

    def _write_error_file(self, file_path: str, error_msg: str) -> None:
        """Write ``error_msg`` (JSON text) to ``file_path`` atomically; warn on failure."""
        try:
            write_error_file(file_path, json.loads(error_msg))
        except Exception as e:
            warnings.warn(f"Unable to write error to file. {type(e).__name__}: {e}", stacklevel=2)

    def record_exception(self, e: BaseException) -> None:
        """Write ``e`` (type, text, traceback, time) to the error file, if one is configured."""
        file = self._get_error_file_path()
        if not file:
            return
        data = {
            "message": {
                "message": f"{type(e).__name__}: {e}",
                "extraInfo": {
                    "py_callstack": "".join(
                        traceback.format_exception(type(e), e, e.__traceback__)
                    ),
                    "timestamp": str(int(clock.wall())),
                },
            }
        }
        try:
            write_error_file(file, data)
        except OSError as err:
            # The rank is failing already; its own exception is the one to keep.
            warnings.warn(f"Unable to write error file {file}: {err}", stacklevel=2)

    def override_error_code_in_rootcause_data(
        self,
        rootcause_error_file: str,
        rootcause_error: dict[str, Any],
        error_code: int = 0,
    ) -> None:
        """Set ``message.errorCode`` in the child's data (dict shape only, as in torch)."""
        if "message" not in rootcause_error:
            logger.warning(
                "child error file (%s) does not have field `message`. \n"
                "cannot override error code: %s",
                rootcause_error_file,
                error_code,
            )
        elif isinstance(rootcause_error["message"], str):
            logger.warning(
                "child error file (%s) has a new message format. \nskipping error code override",
                rootcause_error_file,
            )
        else:
            rootcause_error["message"]["errorCode"] = error_code

    def dump_error_file(self, rootcause_error_file: str, error_code: int = 0) -> None:
        """Copy the root-cause child's error file to this process's error file.

        The exit code is stored as ``errorCode`` because a child killed by a signal could not
        record it itself. An unreadable child file is replaced by a message saying so.
        """
        content = read_error_file(rootcause_error_file)
        if content.data is not None:
            rootcause_error = content.data
        else:
            rootcause_error = {
                "message": {
                    "message": f"child error file {rootcause_error_file} {content.problem}",
                    "extraInfo": {"py_callstack": "", "timestamp": str(int(clock.wall()))},
                }
            }
        if error_code:
            self.override_error_code_in_rootcause_data(
                rootcause_error_file, rootcause_error, error_code
            )
        my_error_file = self._get_error_file_path()
        if my_error_file:
            # The parent's file may exist already (a child that inherited the same variable
            # wrote to it before its own was set): log what it held, then replace it.
            self._rm(my_error_file)
            self._write_error_file(my_error_file, json.dumps(rootcause_error))
            logger.info("dumped error file to parent's %s", my_error_file)
        else:
            logger.error(
                "no error file defined for parent, to copy child error file (%s)",
                rootcause_error_file,
            )

    def _rm(self, my_error_file: str) -> None:
        if not os.path.isfile(my_error_file):
            return
        content = read_error_file(my_error_file)
        if content.data is not None:
            logger.warning(
                "%s already exists and will be overwritten. Original contents:\n%s",
                my_error_file,
                json.dumps(content.data, indent=2),
            )
        else:
            logger.warning(
                "%s already exists and will be overwritten. Unable to load original contents:\n",
                my_error_file,
            )
        os.remove(my_error_file)
