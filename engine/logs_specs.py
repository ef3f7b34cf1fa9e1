"""Where each rank's stdout, stderr and error.json go: ``LogsSpecs`` and ``DefaultLogsSpecs``.

The tree is torch's, byte for byte in its names::

    <log_dir>/<run_id>_<8 random chars>/attempt_<restart_count>/
        filtered_stdout.log  filtered_stderr.log
        <local_rank>/stdout.log  stderr.log  error.json

Three of torch's behaviours are changed, on purpose (see engine/README.md):

* Ranks left out by ``local_ranks_filter`` are not printed on the console; torch sends
  their non-redirected streams to ``/dev/null``, so that output is lost. Here those streams go
  to the rank's own ``stdout.log`` / ``stderr.log`` instead: the console stays as quiet as
  torch makes it, and nothing is lost. ``RunProcsResult.stdouts`` then names the file.
* torch ``rmtree``s ``attempt_<n>`` when it already exists (a second ``reify`` with the
  same restart count wipes the logs of the first). Here an existing attempt directory that has
  content is renamed to ``attempt_<n>.old<k>`` (first free k) and a warning is logged; an
  empty one is reused.

* With ``log_dir=os.devnull`` the filtered files are ``os.devnull`` too (torch makes
  ``/dev/null/filtered_stdout.log``, which cannot be opened).
"""

from __future__ import annotations

import logging
import os
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional, Union

from .std import Std, to_map

__all__ = ["DefaultLogsSpecs", "LogsDest", "LogsSpecs"]

logger = logging.getLogger(__name__)

_CONSOLE = ""
"""A stream path of "" means: inherit the parent's stream (the console)."""


@dataclass
class LogsDest:
    """The file paths of one attempt, each map keyed by local rank.

    ``stdouts``/``stderrs`` hold "" for a stream left on the console. ``tee_*`` are the ranks
    whose files are also copied to the console; they are always a subset of the redirected ones.
    """

    stdouts: dict[int, str] = field(default_factory=dict)
    stderrs: dict[int, str] = field(default_factory=dict)
    tee_stdouts: dict[int, str] = field(default_factory=dict)
    tee_stderrs: dict[int, str] = field(default_factory=dict)
    error_files: dict[int, str] = field(default_factory=dict)
    filtered_stdout: str = field(default_factory=str)
    filtered_stderr: str = field(default_factory=str)


class LogsSpecs(ABC):
    """Decides, from the ranks' environments, where each rank's logs go.

    Args:
        log_dir: base directory of the logs (``os.devnull`` for none at all).
        redirects: streams to send to files, for all ranks or by local rank.
        tee: streams to send to files and also print on the console (implies redirect).
        local_ranks_filter: the ranks whose output may reach the console; None or empty for all.
    """

    def __init__(
        self,
        log_dir: Optional[str] = None,
        redirects: Union[Std, dict[int, Std]] = Std.NONE,
        tee: Union[Std, dict[int, Std]] = Std.NONE,
        local_ranks_filter: Optional[set[int]] = None,
    ) -> None:
        self._root_log_dir = log_dir
        self._redirects = redirects
        self._tee = tee
        self._local_ranks_filter = local_ranks_filter

    @abstractmethod
    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        """Create the directories of one attempt and return its paths.

        Implementations set ``TORCHELASTIC_ERROR_FILE`` in each ``envs[rank]`` (in place, as
        torch does) so that the rank's ``record`` knows where to write.
        """

    @property
    @abstractmethod
    def root_log_dir(self) -> str:
        """The base directory given (or made) at construction."""


class DefaultLogsSpecs(LogsSpecs):
    """torch's layout: one run directory per instance, one ``attempt_<n>`` per reify.

    Raises:
        NotADirectoryError: ``log_dir`` exists and is a file.
    """

    def __init__(
        self,
        log_dir: Optional[str] = None,
        redirects: Union[Std, dict[int, Std]] = Std.NONE,
        tee: Union[Std, dict[int, Std]] = Std.NONE,
        local_ranks_filter: Optional[set[int]] = None,
    ) -> None:
        if log_dir != os.devnull:
            if not log_dir:
                log_dir = tempfile.mkdtemp(prefix="torchelastic_")
            elif not os.path.exists(log_dir):
                os.makedirs(log_dir, exist_ok=True)
            elif os.path.isfile(log_dir):
                raise NotADirectoryError(f"log_dir: {log_dir} is a file")
        super().__init__(log_dir, redirects, tee, local_ranks_filter)
        self._run_log_dir: Optional[str] = None
        """``<log_dir>/<run_id>_xxxxxxxx``, made on the first reify and kept for later attempts."""

    @property
    def root_log_dir(self) -> str:
        return str(self._root_log_dir)

    @property
    def run_log_dir(self) -> Optional[str]:
        """The run directory, once the first attempt has been reified (None before)."""
        return self._run_log_dir

    def _make_log_dir(self, log_dir: Optional[str], rdzv_run_id: str) -> str:
        base = log_dir or tempfile.mkdtemp(prefix="torchelastic_")
        os.makedirs(base, exist_ok=True)
        run_dir = tempfile.mkdtemp(prefix=f"{rdzv_run_id}_", dir=base)
        logger.info("log directory set to: %s", run_dir)
        return run_dir

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        """Build ``attempt_<TORCHELASTIC_RESTART_COUNT>`` and the per-rank paths.

        Run id and restart count come from rank 0's environment, as in torch;
        ``TORCHELASTIC_ERROR_FILE`` is set in each rank's ``envs``.
        """
        nprocs = len(envs)
        if nprocs == 0:
            logger.warning("Empty envs map provided when defining logging destinations.")
        global_env = envs[0] if nprocs > 0 else {}
        run_id = global_env.get("TORCHELASTIC_RUN_ID", "test_run_id")
        restart_count = global_env.get("TORCHELASTIC_RESTART_COUNT", "0")

        devnull = self._root_log_dir == os.devnull
        if devnull:
            attempt_log_dir = os.devnull
        else:
            if not self._run_log_dir:
                self._run_log_dir = self._make_log_dir(self._root_log_dir, run_id)
            attempt_log_dir = os.path.join(self._run_log_dir, f"attempt_{restart_count}")
            _fresh_attempt_dir(attempt_log_dir)

        redirs = to_map(self._redirects, nprocs)
        tees = to_map(self._tee, nprocs)
        for rank, tee_std in tees.items():
            # tee is a redirect to the file plus a tail of that file onto the console.
            redirs[rank] = redirs[rank] | tee_std

        stdouts = dict.fromkeys(range(nprocs), _CONSOLE)
        stderrs = dict.fromkeys(range(nprocs), _CONSOLE)
        tee_stdouts: dict[int, str] = {}
        tee_stderrs: dict[int, str] = {}
        error_files: dict[int, str] = {}

        for rank in range(nprocs):
            if devnull:
                tee_stdouts[rank] = os.devnull
                tee_stderrs[rank] = os.devnull
                error_files[rank] = os.devnull
                envs[rank]["TORCHELASTIC_ERROR_FILE"] = ""
                continue
            rank_dir = os.path.join(attempt_log_dir, str(rank))
            os.mkdir(rank_dir)
            stdout_file = os.path.join(rank_dir, "stdout.log")
            stderr_file = os.path.join(rank_dir, "stderr.log")
            if redirs[rank] & Std.OUT:
                stdouts[rank] = stdout_file
            if redirs[rank] & Std.ERR:
                stderrs[rank] = stderr_file
            if tees[rank] & Std.OUT:
                tee_stdouts[rank] = stdouts[rank]
            if tees[rank] & Std.ERR:
                tee_stderrs[rank] = stderrs[rank]

            if self._local_ranks_filter and rank not in self._local_ranks_filter:
                # Off the console: no tail for this rank. Its console streams go to its own
                # files rather than to /dev/null as in torch, so nothing is lost.
                tee_stdouts.pop(rank, None)
                tee_stderrs.pop(rank, None)
                if stdouts[rank] == _CONSOLE:
                    stdouts[rank] = stdout_file
                if stderrs[rank] == _CONSOLE:
                    stderrs[rank] = stderr_file

            error_files[rank] = os.path.join(rank_dir, "error.json")
            logger.info("Setting worker%s reply file to: %s", rank, error_files[rank])
            envs[rank]["TORCHELASTIC_ERROR_FILE"] = error_files[rank]

        if devnull:
            filtered_stdout = filtered_stderr = os.devnull
        else:
            filtered_stdout = os.path.join(attempt_log_dir, "filtered_stdout.log")
            filtered_stderr = os.path.join(attempt_log_dir, "filtered_stderr.log")
        return LogsDest(
            stdouts,
            stderrs,
            tee_stdouts,
            tee_stderrs,
            error_files,
            filtered_stdout,
            filtered_stderr,
        )

    def __repr__(self) -> str:
        return (
            f"DefaultLogsSpecs(root_log_dir={self._root_log_dir}, redirects={self._redirects}, "
            f"tee={self._tee}, local_ranks_filter={self._local_ranks_filter})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DefaultLogsSpecs):
            return False
        return (
            self._root_log_dir == other._root_log_dir
            and self._redirects == other._redirects
            and self._tee == other._tee
            and self._local_ranks_filter == other._local_ranks_filter
        )


def _fresh_attempt_dir(path: str) -> None:
    """Make ``path`` an empty directory without deleting logs already in it (torch deletes them).

    An existing directory with content is renamed aside to ``<path>.old<k>``; rename within
    one directory is atomic, so a reader never sees half of the old tree.
    """
    try:
        if os.listdir(path):
            k = 1
            while os.path.lexists(f"{path}.old{k}"):
                k += 1
            os.rename(path, f"{path}.old{k}")
            logger.warning(
                "%s already had logs; kept them as %s.old%d instead of deleting them",
                path,
                path,
                k,
            )
        else:
            return  # empty directory: reuse it as is
    except FileNotFoundError:
        pass
    os.makedirs(path)
