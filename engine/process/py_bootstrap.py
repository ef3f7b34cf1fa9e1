"""rankvisor's bootstrap of a Python rank: code of ours around the user's script or module.

Some debugging needs a hook in the rank's own interpreter before the user's code runs: a pdb
post-mortem prompt in the frame that raised (``--post-mortem``), a debugpy listener
(``--debugpy``), torch's worker server (every Python rank unless ``--no-collectives``: a
one-shot import hook starts it right after the script imports ``torch.distributed``, so a
script that never does pays nothing). The supervisor then starts ``python [its flags] -c
<run main()> <script | -m module> args`` instead of ``python [its flags] <script | -m
module> args`` (``wrap_python_args``; a copy of this file is loaded by its path, so the
script finds no module of rankvisor's imported, and a package removed meanwhile does not
matter), and ``main`` puts back everything the script can observe before it runs it in the
real ``__main__`` module: ``sys.argv``, ``sys.orig_argv``, ``sys.path[0]``, ``__main__``'s
``__file__`` / ``__spec__`` / ``__loader__`` (so that spawn-started children, DataLoader
workers among them, find the script as they would), the environment without our variables;
no signal handler, no exit hook. The exit code is the one Python would give (1 after an
uncaught exception, ``sys.exit``'s, death by SIGINT), and tracebacks leave our frames out.

The options come in the environment (``ENV_*``), which ``main`` removes. Standard library
only: the error-file writer (``rankvisor.engine.errors``) and debugpy are imported when
they are needed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final

__all__ = [
    "ENV_DEBUGPY",
    "ENV_DEBUGPY_WAIT",
    "ENV_POST_MORTEM",
    "ENV_WORKER_SOCKET",
    "HOLD_FILE",
    "debugger_wait_since",
    "hold_path",
    "is_python_rank",
    "loopback_peer_uid",
    "main",
    "post_mortem",
    "read_hold",
    "split_python_args",
    "wait_path",
    "wrap_python_args",
]

ENV_POST_MORTEM: Final = "RANKVISOR_POST_MORTEM"
"""Set: an uncaught exception writes error.json, then stops at a pdb post-mortem prompt."""
ENV_DEBUGPY: Final = "RANKVISOR_DEBUGPY"
"""``host:port``: listen for a debugpy (DAP) client there before the user's code runs."""
ENV_DEBUGPY_WAIT: Final = "RANKVISOR_DEBUGPY_WAIT"
"""Set: ... and wait until a client attaches."""
ENV_WORKER_SOCKET: Final = "RANKVISOR_WORKER_SOCKET"
"""A unix socket path: once the script imports ``torch.distributed``, serve torch's worker
server there (the Flight Recorder's entries, stacks: ``engine.forensics.worker_server``)."""
DEBUGGER_WAIT_FILE: Final = "debugger_wait"
"""Beside the rank's error.json while it waits for a debugger (``wait_path``)."""
HOLD_FILE: Final = "debug_hold"
"""Beside the rank's error.json while a person is at its post-mortem prompt: the debug hold
(the supervisor's teardown of the other ranks waits while it exists and the rank lives)."""

_CODE: Final = (
    "import importlib.util as u; s = u.spec_from_file_location('_rankvisor_bootstrap', {path!r}); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); m.main()"
)
"""The ``-c`` line: this file loaded by its path, not through the ``rankvisor`` package,
whose import (and everything it imports) would cost the rank a few hundred milliseconds
and fill its ``sys.modules``."""


_STABLE: list[str] = []


def _code() -> str:
    if not _STABLE:
        _STABLE.append(_stable_path())
    return _CODE.format(path=_STABLE[0])


def _stable_path() -> str:
    """A copy of this file that outlives the installed package (a run whose package is
    upgraded or removed meanwhile still starts its ranks, and restarts them, as it began):
    ``<tmp>/rankvisor-<uid>/<digest>/py_bootstrap.py``, named by its content; this file's
    own path when the copy cannot be made safely (a directory not ours)."""
    import hashlib
    import tempfile

    here = os.path.abspath(__file__)
    try:
        with open(here, "rb") as f:
            source = f.read()
        base = os.path.join(tempfile.gettempdir(), f"rankvisor-{os.getuid()}")
        os.makedirs(base, mode=0o700, exist_ok=True)
        # Another user may have made it first, or put a link there: lstat, never follow.
        # (Standard library only here: the rank loads this file alone; the worker sockets
        # go through ``rundir.private_tmp``, which walks on to a name of ours.)
        st = os.lstat(base)
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
                or st.st_mode & 0o077):
            return here
        folder = os.path.join(base, hashlib.sha256(source).hexdigest()[:16])
        path = os.path.join(folder, "py_bootstrap.py")
        if path == here:
            return here
        os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            with open(path, "rb") as f:
                if f.read() == source:
                    return path
        except OSError:
            pass
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(source)
        os.replace(tmp, path)
        return path
    except OSError:
        return here

# Interpreter options that take a value (``-X dev``, ``-W error``), and those that end the
# options with a program of their own.
_VALUED: Final = frozenset("XW")
_FLAGS: Final = frozenset("bBdEhiIOqsSuvRP")


def split_python_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``("-u", "job.py", "a")`` -> ``(["-u"], ["job.py", "a"])``; ``-m mod`` stays with the
    target (``["-m", "mod", ...]``).

    Raises:
        ValueError: no script or module (``-c``, ``-``, or nothing), in one line.
    """
    opts: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" or (arg.startswith("-m") and len(arg) > 2):
            return opts, ["-m", arg[2:] or (args[i + 1] if i + 1 < len(args) else "")] + list(
                args[i + 2 if arg == "-m" else i + 1:]
            )
        if arg in ("-c", "-") or arg.startswith("-c"):
            raise ValueError("a Python rank given as -c CODE or stdin has no script to debug")
        if arg == "--":
            i += 1
            break
        if arg.startswith("--"):
            opts.append(arg)  # --check-hash-based-pycs takes a value in the same word only
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            opts.append(arg)
            if letters[0] in _VALUED and len(letters) == 1:
                if i + 1 >= len(args):
                    raise ValueError(f"python option {arg} needs a value")
                opts.append(args[i + 1])
                i += 2
                continue
            if not set(letters) <= _FLAGS and letters[0] not in _VALUED:
                raise ValueError(f"python option {arg}: not one rankvisor can keep")
            i += 1
            continue
        break
    target = list(args[i:])
    if not target or target[0] in ("", "-") or target[:2] == ["-m", ""]:
        raise ValueError("a Python rank needs a script or -m module to run under the bootstrap")
    return opts, target


def wrap_python_args(args: Sequence[str]) -> tuple[str, ...]:
    """A Python rank's arguments (after the interpreter) run under ``main``.

    Raises:
        ValueError: see ``split_python_args``.
    """
    opts, target = split_python_args(args)
    return (*opts, "-c", _code(), *target)


_PYTHON: Final = re.compile(r"python[0-9.]*$")


def is_python_rank(argv: Sequence[str]) -> bool:
    """Whether a command line (interpreter first) is a Python script or ``-m`` module that
    the bootstrap can run (not ``-c CODE``, stdin, or another program)."""
    if not argv or not _PYTHON.match(os.path.basename(argv[0])):
        return False
    try:
        split_python_args(argv[1:])
    except ValueError:
        return False
    return True


def hold_path(error_file: str) -> str:
    """The debug hold's file of the rank whose error.json is ``error_file``."""
    return os.path.join(os.path.dirname(error_file), HOLD_FILE)


def wait_path(error_file: str) -> str:
    """The file that says a rank waits for a debugger (``--debugpy-wait``), beside its
    error.json: ``{"pid", "since"}`` while it waits, gone once a client attached."""
    return os.path.join(os.path.dirname(error_file), DEBUGGER_WAIT_FILE)


def debugger_wait_since(error_file: str, pid: int | None) -> float | None:
    """Since when (wall clock) the rank with ``error_file`` and ``pid`` waits for a debugger;
    None if it does not."""
    if not error_file or pid is None:
        return None
    data = _read_json(wait_path(error_file))
    if data is None or data.get("pid") != pid:
        return None
    since = data.get("since")
    return float(since) if isinstance(since, (int, float)) else 0.0


def read_hold(error_file: str) -> dict[str, object] | None:
    """The debug hold of a rank (``{"since", "where", "error", "pid"}``), None if none."""
    return _read_json(hold_path(error_file)) if error_file else None


def _read_json(path: str) -> dict[str, object] | None:
    """A small JSON object file a rank writes beside its error.json; None if none."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# -- the child side -------------------------------------------------------------------------


def main() -> None:
    """Run the user's script or module as Python would, with the debugging asked for."""
    post = os.environ.pop(ENV_POST_MORTEM, None) is not None
    listen = os.environ.pop(ENV_DEBUGPY, "")
    wait = os.environ.pop(ENV_DEBUGPY_WAIT, None) is not None
    worker_socket = os.environ.pop(ENV_WORKER_SOCKET, "")
    argv = sys.argv[1:]  # sys.argv is ["-c", target...]
    _restore_orig_argv()
    if worker_socket:
        _after_import("torch.distributed", lambda: _serve_worker(worker_socket))
    if listen:
        _listen(listen, wait)
    try:
        if argv[0] == "-m":
            _run_module(argv[1], argv[2:])
        else:
            _run_script(argv[0], argv)
    except SystemExit:
        raise
    except BaseException as e:
        _strip_our_frames(e)
        if post and not isinstance(e, KeyboardInterrupt):
            post_mortem(e)  # its traceback is printed there, before the prompt
            sys.excepthook = _printed
        else:
            sys.excepthook = _without_our_frames(sys.excepthook)
        # Python itself ends the process, as it would have: exit code 1 (death by SIGINT
        # for a KeyboardInterrupt) after the usual finalisation.
        raise


def _printed(*_exc: object) -> None:
    """The traceback was printed before the post-mortem prompt: not again."""


def _without_our_frames(hook: Callable[..., object]) -> Callable[..., object]:
    def print_it(kind: type[BaseException], e: BaseException, tb: TracebackType | None) -> None:
        _strip_our_frames(e)
        hook(kind, e, e.__traceback__)

    return print_it


def _restore_orig_argv() -> None:
    orig = list(getattr(sys, "orig_argv", []))
    if "-c" in orig:
        at = orig.index("-c")
        if orig[at + 1:at + 2] == [_code()]:
            sys.orig_argv = orig[:at] + orig[at + 2:]


def _fresh_main() -> dict[str, object]:
    import builtins

    import __main__

    names = vars(__main__)
    kept = {k: names[k] for k in ("__builtins__",) if k in names}
    names.clear()
    names.update(kept)
    names.setdefault("__builtins__", builtins)
    # What Python's own __main__ holds before a script or -m module runs.
    names.update(
        __name__="__main__", __doc__=None, __package__=None, __spec__=None, __annotations__={}
    )
    return names


def _run_script(path: str, argv: list[str]) -> None:
    from importlib.machinery import SourceFileLoader

    # Joined, not normalised: Python keeps "a/../b" in __file__ and tracebacks as given.
    full = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    sys.argv[:] = argv
    sys.path[0] = os.path.dirname(os.path.realpath(full))
    names = _fresh_main()
    names.update(__file__=full, __cached__=None, __loader__=SourceFileLoader("__main__", full))
    with open(full, "rb") as f:
        source = f.read()
    exec(compile(source, full, "exec", dont_inherit=True), names)


def _run_module(module: str, args: list[str]) -> None:
    import runpy

    sys.argv[:] = ["-m", *args]
    sys.path[0] = os.getcwd()
    _fresh_main()
    runpy._run_module_as_main(module, alter_argv=True)  # what ``python -m`` itself calls


_SERVERS: list[Any] = []
"""The worker server started for the script (kept alive until the interpreter ends)."""


class _AfterImport:
    """A one-shot import hook: ``then()`` runs right after ``name`` is first imported.

    It leaves ``sys.meta_path`` at once (the first time ``name`` is looked up), so a
    script that never imports ``name`` pays nothing and one that does sees the import
    system as it was; the loader's own ``exec_module`` does the import.
    """

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self._name = name
        self._then = then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self._name:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec
        then = self._then

        def exec_module(module: Any) -> None:
            try:
                run(module)
            finally:
                try:
                    del loader.exec_module  # the loader as it was
                except AttributeError:
                    pass
            then()

        try:
            loader.exec_module = exec_module
        except AttributeError:  # a loader that takes no attributes: left without
            pass
        return spec


def _after_import(name: str, then: Callable[[], None]) -> None:
    if name in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


def _serve_worker(path: str) -> None:
    """torch's worker server on ``path``, as ``worker_main()`` starts it; a torch without
    one (before 2.4) or a socket that cannot be made leaves the rank as it was."""
    try:
        from torch._C._distributed_c10d import _WorkerServer
    except ImportError:
        return
    try:
        if os.path.exists(path):
            os.unlink(path)  # an earlier incarnation's: torch refuses a path that exists
        _SERVERS.append(_WorkerServer(path))
    except Exception:  # noqa: BLE001 - never the rank's failure
        return
    # Stopped before the interpreter finalizes, as ``worker_main()`` stops it on the way
    # out: a server left to finalization destroys its running thread, std::terminate, and a
    # rank that raised (exit code 1) would end with SIGABRT instead.
    import atexit

    atexit.register(_stop_servers)


def _stop_servers() -> None:
    while _SERVERS:
        server = _SERVERS.pop()
        try:
            server.shutdown()
        except Exception:  # noqa: BLE001 - the rank's own exit status is what counts
            pass


def _listen(where: str, wait: bool) -> None:
    import debugpy

    host, _, port = where.rpartition(":")
    # Children (DataLoader workers, subprocesses) stay as they would be: not under debugpy.
    debugpy.configure(subProcess=False)
    _guard_debugpy()
    # In-process: the rank's own listener (the guarded one) takes the client, no adapter
    # process with a listener of its own that anyone on the host could reach.
    debugpy.listen((host or "127.0.0.1", int(port)), in_process_debug_adapter=True)
    if wait:
        # While it waits, a person is attaching a debugger: never a hang (the supervisor
        # reads this file).
        error_file = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
        marker = wait_path(error_file) if error_file else ""
        if marker:
            try:
                with open(marker, "w", encoding="utf-8") as f:
                    json.dump({"pid": os.getpid(), "since": time.time()}, f)
            except OSError:
                marker = ""
        try:
            debugpy.wait_for_client()
        finally:
            if marker:
                try:
                    os.unlink(marker)
                except OSError:
                    pass


# -- the debugger's door: the job's user only ------------------------------------------------
#
# A DAP client may evaluate any code in the rank, and a loopback TCP port is open to every
# user of the host. The listener pydevd makes is swapped for one that asks the kernel who
# owns the other end of each connection (what SO_PEERCRED says of a unix socket) and closes
# every connection that is not the job's user's, before a byte is read. It binds with
# SO_REUSEPORT: the supervisor holds the port (bound, never listening) for the whole run, so
# that between two incarnations no other user can take it (the kernel shares a port that
# way only between sockets of one user).

_REFUSALS_SAID: Final = 3
_refused: list[int] = []


def loopback_peer_uid(conn: Any) -> int | None:
    """The uid owning the other end of ``conn``, a TCP connection between two sockets of
    this host, from the kernel's socket tables (``/proc/net/tcp``, ``tcp6``); None when no
    socket there matches (the peer has gone, or is not on this host)."""
    import socket

    try:
        peer = conn.getpeername()[:2]
        mine = conn.getsockname()[:2]
    except OSError:
        return None
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        want = (_table_address(family, *peer), _table_address(family, *mine))
        if None in want:
            continue
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 7 and (fields[1], fields[2]) == want:
                        return int(fields[7])
        except (OSError, ValueError):
            continue
    return None


def _table_address(family: int, host: str, port: int) -> str | None:
    """``host:port`` as the kernel's tables spell it: the address's 32-bit words in the
    machine's own byte order, in hex, then the port."""
    import socket
    import struct

    try:
        if family == socket.AF_INET:
            packed = socket.inet_pton(socket.AF_INET, host)
        elif ":" in host:
            packed = socket.inet_pton(socket.AF_INET6, host)
        else:  # an IPv4 peer of a dual-stack socket
            packed = socket.inet_pton(socket.AF_INET6, "::ffff:" + host)
    except OSError:
        return None
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def _own_user_only_listener(host: str, port: int) -> Any:
    """What pydevd's ``create_server_socket`` gives, bound for the job's user alone."""
    import socket

    class OwnUserOnly(socket.socket):
        def accept(self) -> tuple[socket.socket, Any]:
            while True:
                conn, address = super().accept()
                uid = loopback_peer_uid(conn)
                if uid == os.getuid():
                    return conn, address
                conn.close()
                _refused.append(1)
                if len(_refused) <= _REFUSALS_SAID:
                    print(f"rankvisor: debugpy: refused a client from {address[0]}:"
                          f"{address[1]} (user {'unknown' if uid is None else uid}; only "
                          f"user {os.getuid()} may attach)", file=sys.stderr, flush=True)

    server = OwnUserOnly(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind((host, port))
        server.settimeout(None)
    except BaseException:
        server.close()
        raise
    return server


def _guard_debugpy() -> None:
    """Put the guarded listener in pydevd's place; a debugpy where that cannot be done is
    refused (the rank ends at once with one line) rather than left open."""
    import debugpy
    import debugpy.server.api  # noqa: F401 - puts pydevd on the path

    try:
        import pydevd
        from _pydevd_bundle import pydevd_comm
    except ImportError:
        pydevd = pydevd_comm = None
    if not (hasattr(pydevd, "create_server_socket")
            and hasattr(pydevd_comm, "create_server_socket")):
        raise SystemExit(
            f"rankvisor: --debugpy: debugpy {getattr(debugpy, '__version__', '?')} cannot be "
            "guarded against other users; not listening (pip install 'debugpy>=1.8,<2')"
        )
    pydevd.create_server_socket = _own_user_only_listener
    pydevd_comm.create_server_socket = _own_user_only_listener


def _strip_our_frames(e: BaseException) -> None:
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, "<string>"):
        tb = tb.tb_next
    if tb is not None:
        e.__traceback__ = tb


def _excepthook(e: BaseException) -> None:
    sys.excepthook(type(e), e, e.__traceback__)


def _error_handler() -> Any:
    """torch's ``ErrorHandler`` as the engine has it (imported only when a rank fails)."""
    if __package__:
        from ..errors.error_handler import ErrorHandler
    else:  # loaded by its path (``_CODE``): through the installed package
        import importlib

        ErrorHandler = importlib.import_module(
            "rankvisor.engine.errors.error_handler"
        ).ErrorHandler
    return ErrorHandler()


def _where(tb: TracebackType | None) -> str:
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return ""
    code = last.tb_frame.f_code
    return f"{os.path.basename(code.co_filename)}:{last.tb_lineno} in {code.co_name}"


def post_mortem(e: BaseException, stdin_path: str | None = None) -> None:
    """``e`` would end the rank: write its error.json as torch's ``@record`` does (unless
    the rank's own ``@record`` already did), print its traceback, then hold a pdb
    post-mortem prompt in the frame that raised until the person continues or quits.

    Args:
        stdin_path: Where to read the person's lines when ``sys.stdin`` is not the
            supervisor's pipe (a multiprocessing child's is /dev/null).
    """
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if error_file and not os.path.exists(error_file):
        _error_handler().record_exception(e)
    _excepthook(e)
    where = _where(e.__traceback__)
    hold = hold_path(error_file) if error_file else ""
    if hold:
        data = {"pid": os.getpid(), "since": time.time(), "where": where,
                "error": f"{type(e).__name__}: {e}"[:500]}
        try:
            with open(hold, "w", encoding="utf-8") as f:
                json.dump(data, f)
        except OSError:
            hold = ""
    sys.stderr.write(
        f"rankvisor --post-mortem: {type(e).__name__} at {where}; pdb is at the frame that "
        "raised. c or q ends the rank as it would have ended (exit 1).\n"
    )
    sys.stderr.flush()
    import pdb

    stdin = open(stdin_path) if stdin_path else None  # noqa: SIM115 - closed below
    try:
        debugger = pdb.Pdb(stdin=stdin) if stdin is not None else pdb.Pdb()
        if stdin is not None:
            debugger.use_rawinput = False
        debugger.reset()
        debugger.interaction(None, e.__traceback__)
    finally:
        if stdin is not None:
            stdin.close()
        if hold:
            try:
                os.unlink(hold)
            except OSError:
                pass
