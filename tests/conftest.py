"""Shared fixtures: real processes, real files, bounded waits."""

from __future__ import annotations

import ast
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

BIN = Path(__file__).parent / "bin"
"""Tiny child programs, run with ``sys.executable``."""

PYTHON = sys.executable

GLOO_JOBS = pytest.mark.xdist_group("gloo-jobs")
"""Tests whose torch.distributed jobs judge time (a rank's silence against its peers', an
agent's restart) run one after another on one worker (pyproject: ``--dist loadgroup``): two
such jobs at once on two cores starve each other's ranks, and the silence looks like none."""

TORCH_IMPORT = pytest.mark.xdist_group("torch-import")
"""Pure tests that import torch's launcher in the test process (3 s of one core each time):
on one worker, torch is imported once for all of them, not once per worker."""

NEEDS_PIDFD_EXIT = pytest.mark.skipif(
    tuple(int(x) for x in os.uname().release.split(".")[:2]) < (6, 15),
    reason="PIDFD_INFO_EXIT (an exit status kept with a pidfd) needs Linux 6.15 or later",
)

PROCESS_EVENTS = frozenset({
    "subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp",
    "os.exec", "os.spawn", "os.system",
})
"""The audit events of a process being started (multiprocessing's spawn is caught apart:
it forks through ``_posixsubprocess`` with no event of its own)."""

collect_ignore = ["bench"]
"""Benchmarks print figures; they are run by hand, never collected as tests."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than the cores this process may run on. A worker of
    the whole suite spends most of its time waiting on its processes (a rank's sleep, a
    gloo timeout, a link held down): on two cores, one run after the other, three workers
    took 606 s and four 460 s, and the tests' own times added up to the same 1740 s in
    both (2026-12-06). The time-judging gloo jobs still run one at a time (``GLOO_JOBS``).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides where it is set, as it does without
    this hook."""
    explicit = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if explicit:
        return int(explicit)
    return len(os.sched_getaffinity(0)) + 2


@pytest.fixture(autouse=True)
def _own_state_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test registers its runs in a state dir of its own, never in the home
    directory's (nor in another test's: ``ls`` of one test sees its own runs only).

    Short (sockets live in it: a Unix socket's path has room for 107 bytes) and 0700, as
    rankvisor wants it. Tests that need another state dir set it themselves."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="rv-state-", dir="/tmp")
    os.chmod(path, 0o700)
    monkeypatch.setenv("RANKVISOR_STATE_DIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def limit_memory(memory_dir: str, limit: int) -> None:
    """A memory limit on one cgroup, with no swap to spill into."""
    if os.path.exists(os.path.join(memory_dir, "memory.max")):  # v2
        Path(memory_dir, "memory.max").write_text(str(limit))
        if os.path.exists(os.path.join(memory_dir, "memory.swap.max")):
            Path(memory_dir, "memory.swap.max").write_text("0")
        return
    Path(memory_dir, "memory.limit_in_bytes").write_text(str(limit))
    memsw = Path(memory_dir, "memory.memsw.limit_in_bytes")
    if memsw.exists():
        memsw.write_text(str(limit))  # memory + swap: no swap either


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in (b"Z", b"X")


@pytest.fixture
def bin_path() -> Callable[[str], str]:
    """``bin_path("echo_rank.py")`` -> absolute path of a child program."""
    return lambda name: str(BIN / name)


@pytest.fixture(autouse=True)
def _no_inherited_torchelastic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test run launched from inside a torchrun job must not leak its run id or restart
    # count into the layouts the tests check.
    for key in list(os.environ):
        if key.startswith("TORCHELASTIC_"):
            monkeypatch.delenv(key, raising=False)


# -- test tiers ---------------------------------------------------------------------------
# Modules that start processes are marked ``processes`` (and ``gloo`` where they run
# torch.distributed jobs); ``python -m pytest -m "not processes and not gloo"`` is the inner
# loop, and in it a test that starts a process fails, naming the mark its module lacks.


class _ProcessGuard:
    """Refuses to start a process while a test runs that says it starts none."""

    def __init__(self) -> None:
        self.refusing: str | None = None  # the test's node id, while it runs

    def audit(self, event: str, _args: object) -> None:
        if self.refusing is not None and event in PROCESS_EVENTS:
            raise RuntimeError(
                f"{self.refusing} started a process ({event}) in the inner loop: mark its "
                "module pytestmark = pytest.mark.processes"
            )


_GUARD = _ProcessGuard()


def _inner_loop(config: pytest.Config) -> bool:
    expression = config.getoption("markexpr", "") or ""
    return "not processes" in " ".join(expression.split())


def _module_marks(source: str) -> frozenset[str] | None:
    """The marks a test module's ``pytestmark`` gives all its tests, read from its source
    without importing it: ``pytest.mark.NAME`` (called or not), alone or in a list; None
    where the module has no such plain assignment (other entries, such as an xdist group
    kept in a constant, are left out: the set is a lower bound)."""
    tree = ast.parse(source)
    found: list[ast.expr] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            if not isinstance(node, ast.Assign) or node.value is None:
                return None  # added to, or annotated: not read here
            found.append(node.value)
    if len(found) != 1:
        return None
    value = found[0]
    entries = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    marks = set()
    for entry in entries:
        if isinstance(entry, ast.Call):
            entry = entry.func
        if (isinstance(entry, ast.Attribute) and isinstance(entry.value, ast.Attribute)
                and entry.value.attr == "mark" and isinstance(entry.value.value, ast.Name)
                and entry.value.value.id == "pytest"):
            marks.add(entry.attr)
    return frozenset(marks)


def _never_selected(expression: str, marks: frozenset[str]) -> bool:
    """True if no test carrying at least ``marks`` can match the ``-m`` expression,
    whatever other marks it has: every mark the expression names is tried both ways."""
    from itertools import product

    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expression)
    names: set[str] = set()
    kwargs_used = False

    def record(name: str, /, **kwargs: object) -> bool:
        nonlocal kwargs_used
        names.add(name)
        kwargs_used = kwargs_used or bool(kwargs)
        return name in marks

    compiled.evaluate(record)
    free = sorted(names - marks)
    if kwargs_used or len(free) > 8:
        return False
    for values in product((False, True), repeat=len(free)):
        given = marks | {name for name, on in zip(free, values, strict=True) if on}
        if compiled.evaluate(lambda name, /, given=given, **_kw: name in given):
            return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A module whose own marks leave all its tests out of ``-m`` is not imported at all.

    Each xdist worker imports (and rewrites the asserts of) every module it collects, only
    to deselect most of them in the inner loop: two thirds of its collection time. The
    marks are read from the module's source; a module they do not settle is collected."""
    expression = config.getoption("markexpr", "") or ""
    name = collection_path.name
    if not expression.strip() or not (name.startswith("test_") and name.endswith(".py")):
        return None
    try:
        marks = _module_marks(collection_path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    try:
        # pytest's expression parser is not public API: should it change, collect as usual.
        if marks and _never_selected(expression, marks):
            return True
    except Exception:  # noqa: BLE001 - a shortcut only; never a reason to lose a test
        return None
    return None


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a script (``cmd &`` in a shell without job
    # control) inherits SIGINT ignored, and so would every process a test starts (an ignored
    # signal survives exec): a rank sent SIGINT, or a TUI's Ctrl-C, would do nothing. The
    # tests are about what a person's terminal gives: the default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if _inner_loop(config):
        sys.addaudithook(_GUARD.audit)
        import multiprocessing.util

        spawn = multiprocessing.util.spawnv_passfds

        def guarded(path: object, args: object, passfds: object) -> object:
            _GUARD.audit("os.posix_spawn", None)
            return spawn(path, args, passfds)

        multiprocessing.util.spawnv_passfds = guarded


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    refusing = _inner_loop(item.config) and item.get_closest_marker("processes") is None
    _GUARD.refusing = item.nodeid if refusing else None
    try:
        return (yield)
    finally:
        _GUARD.refusing = None
