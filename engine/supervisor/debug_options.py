"""Debugging asked for on the command line: ``--post-mortem``, ``--debugpy``: ``DebugOptions``.

Both run the chosen Python ranks under rankvisor's bootstrap (``engine.process.py_bootstrap``):
their command line becomes ``python [flags] -c <bootstrap> <script | -m module> args`` and
their environment carries the options, which the bootstrap removes before the script runs.
``validate`` refuses, in one line, what cannot work: a rank that is not Python, a Python
without rankvisor, ``--debugpy`` without debugpy (the ``debug`` extra), ports off the range.
``vscode_launch`` is the compound attach configuration written into the run dir for
``--debugpy``, and ``debugpy_banner`` the lines printed with it (the ``ssh -L`` line a
laptop needs to reach the ports).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..process.py_bootstrap import ENV_DEBUGPY, ENV_DEBUGPY_WAIT, ENV_POST_MORTEM, wrap_python_args

__all__ = [
    "DEFAULT_DEBUGPY_PORT",
    "DebugOptions",
    "LAUNCH_FILE",
    "debugpy_banner",
    "debugpy_lines",
    "launch_ports",
    "missing_modules",
    "vscode_launch",
]

DEFAULT_DEBUGPY_PORT: Final = 5678
"""debugpy's own default port: rank r listens on 5678 + r."""
LAUNCH_FILE: Final = "launch.json"
"""The VS Code attach configuration, in the run directory."""

_PYTHON: Final = re.compile(r"python[0-9.]*$")


@dataclass(frozen=True)
class DebugOptions:
    """Which ranks run under the bootstrap, and for what."""

    post_mortem: frozenset[int] = frozenset()
    """Ranks whose uncaught exception stops at a pdb post-mortem prompt."""
    debugpy: frozenset[int] = frozenset()
    """Ranks that listen for a debugpy client on ``127.0.0.1:debugpy_port + rank``."""
    debugpy_port: int = DEFAULT_DEBUGPY_PORT
    debugpy_wait: bool = False
    """The ``debugpy`` ranks wait for a client before the user's code runs."""

    def bootstrapped(self, rank: int) -> bool:
        return rank in self.post_mortem or rank in self.debugpy

    def argv(self, rank: int, argv: tuple[str, ...]) -> tuple[str, ...]:
        """``rank``'s command line (interpreter first), under the bootstrap if it needs it."""
        if not self.bootstrapped(rank):
            return argv
        return (argv[0], *wrap_python_args(argv[1:]))

    def env(self, rank: int) -> dict[str, str]:
        """The bootstrap's options for ``rank`` (none for a rank it does not wrap)."""
        env: dict[str, str] = {}
        if rank in self.post_mortem:
            env[ENV_POST_MORTEM] = "1"
        if rank in self.debugpy:
            env[ENV_DEBUGPY] = f"127.0.0.1:{self.debugpy_port + rank}"
            if self.debugpy_wait:
                env[ENV_DEBUGPY_WAIT] = "1"
        return env

    def validate(self, argv_of: Callable[[int], tuple[str, ...]], nprocs: int) -> None:
        """Refuse, in one line, options that cannot work for these ranks' command lines
        (``argv_of(rank)``, interpreter first).

        Raises:
            ValueError: naming the flag and what to do.
        """
        flags = [f for f, ranks in (("--post-mortem", self.post_mortem),
                                    ("--debugpy", self.debugpy)) if ranks]
        if not flags:
            return
        flag = flags[0]
        chosen = sorted(self.post_mortem | self.debugpy)
        bad = [r for r in chosen if not 0 <= r < nprocs]
        if bad:
            raise ValueError(f"{flag} names rank {bad[0]}, but ranks are 0..{nprocs - 1}")
        pythons: dict[str, None] = {}
        for rank in chosen:
            argv = argv_of(rank)
            if not _PYTHON.match(os.path.basename(argv[0])):
                raise ValueError(
                    f"{flag} debugs Python ranks; {os.path.basename(argv[0])} is not Python "
                    "(drop --no-python, or run the script with python)"
                )
            try:
                wrap_python_args(argv[1:])
            except ValueError as e:
                raise ValueError(f"{flag}: {e}") from None
            pythons[argv[0]] = None
        if self.debugpy:
            last = self.debugpy_port + max(self.debugpy)
            if not 1024 <= self.debugpy_port or last > 65535:
                raise ValueError(
                    f"--debugpy port {self.debugpy_port}: ranks need ports "
                    f"{self.debugpy_port}..{last}; give a base port from 1024 to "
                    f"{65535 - max(self.debugpy)}"
                )
            taken = [p for p in self.debugpy_ports() if _port_in_use(p)]
            if taken:
                raise ValueError(
                    f"--debugpy: port {taken[0]} on 127.0.0.1 is in use; give another base "
                    "port (--debugpy RANKS:PORT)"
                )
        # The bootstrap is loaded by its path; a post-mortem writes error.json with the
        # engine's writer, so that Python needs rankvisor, and --debugpy needs debugpy.
        modules = ["rankvisor.engine.errors"] if self.post_mortem else []
        if self.debugpy:
            modules.append("debugpy")
        for python in pythons:
            missing = missing_modules(python, modules)
            if "debugpy" in missing:
                raise ValueError(
                    "--debugpy needs debugpy in the ranks' Python: "
                    "pip install 'rankvisor[debug]'"
                )
            if missing:
                raise ValueError(
                    f"--post-mortem needs rankvisor installed in the ranks' Python ({python})"
                )

    def debugpy_ports(self) -> dict[int, int]:
        """Each debugpy rank's port."""
        return {r: self.debugpy_port + r for r in sorted(self.debugpy)}


def missing_modules(python: str, modules: Sequence[str]) -> list[str]:
    """Which of ``modules`` the interpreter ``python`` cannot import (found, not imported).

    Our own interpreter answers in-process; another one (``PYTHON_EXEC``) in a subprocess.
    """
    mine = os.path.realpath(sys.executable)
    found = os.path.realpath(python) if os.sep in python else os.path.realpath(
        _which(python) or python
    )
    if found == mine:
        return [m for m in modules if not _findable(m)]
    probe = (
        "import importlib.util, sys\n"
        "def ok(m):\n"
        "    try:\n"
        "        return importlib.util.find_spec(m) is not None\n"
        "    except ImportError:\n"
        "        return False\n"
        "print(' '.join(m for m in sys.argv[1:] if not ok(m)))\n"
    )
    try:
        out = subprocess.run(
            [python, "-c", probe, *modules], capture_output=True, text=True, timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return list(modules)
    return out.split()


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def _which(program: str) -> str | None:
    import shutil

    return shutil.which(program)


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def vscode_launch(options: DebugOptions, cwd: str, role: str = "rank") -> dict[str, object]:
    """A VS Code ``launch.json``: one attach configuration per rank, and a compound that
    attaches to all of them at once."""
    names = []
    configurations = []
    for rank, port in options.debugpy_ports().items():
        name = f"rankvisor: attach {role} {rank}"
        names.append(name)
        configurations.append({
            "name": name,
            "type": "debugpy",
            "request": "attach",
            "connect": {"host": "127.0.0.1", "port": port},
            "pathMappings": [{"localRoot": "${workspaceFolder}", "remoteRoot": cwd}],
            "justMyCode": False,
        })
    return {
        "version": "0.2.0",
        "configurations": configurations,
        "compounds": [{"name": "rankvisor: attach every rank", "configurations": names}],
    }


def debugpy_banner(options: DebugOptions, launch_path: str, host: str | None = None) -> str:
    """What ``--debugpy`` prints: the ports, the launch.json, the ``ssh -L`` line."""
    return "\n".join(
        debugpy_lines(options.debugpy_ports(), launch_path, host, wait=options.debugpy_wait)
    )


def debugpy_lines(
    ports: Mapping[int, int], launch_path: str, host: str | None = None, *, wait: bool = False
) -> list[str]:
    """The banner's lines: where each rank listens, the launch.json, the ``ssh -L`` line."""
    listed = ", ".join(f"rank {r} on 127.0.0.1:{p}" for r, p in ports.items())
    forwards = " ".join(f"-L {p}:127.0.0.1:{p}" for p in ports.values())
    return [
        f"debugpy: {listed}" + (" (each waits for a client before it runs)" if wait else ""),
        f"VS Code attach configuration (compound 'rankvisor: attach every rank'): "
        f"{launch_path}",
        f"from a laptop: ssh {forwards} {host or socket.gethostname()}",
    ]


def launch_ports(run_dir: str) -> dict[int, int]:
    """rank -> debugpy port, read back from the run's ``launch.json`` ({} without one): what
    ``rankvisor status`` shows of a ``--debugpy`` run, for as long as its run dir is kept."""
    try:
        with open(os.path.join(run_dir, LAUNCH_FILE), encoding="utf-8") as f:
            launch = json.load(f)
        ports = {}
        for config in launch.get("configurations", []):
            rank = str(config.get("name", "")).rsplit(" ", 1)[-1]
            port = config.get("connect", {}).get("port")
            if rank.isdigit() and isinstance(port, int):
                ports[int(rank)] = port
        return ports
    except (OSError, ValueError, AttributeError):
        return {}


def write_launch(options: DebugOptions, run_dir: str, cwd: str) -> str:
    """Write ``launch.json`` into ``run_dir``; its path."""
    path = os.path.join(run_dir, LAUNCH_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(vscode_launch(options, cwd), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path
