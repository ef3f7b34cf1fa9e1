"""Binary ranks through torch's start_processes and ours, in one run, compared.

Where the two must agree (the log tree and its bytes, RunProcsResult, exit codes, signal
messages, validation errors, tee prefixes, filtered files, Std parsing) the test asserts
equality. Where we fix a torch defect (engine/README.md lists them) it asserts torch's
observed behaviour and ours side by side.

Binary ranks here never import torch; only the test of a forgotten close() with tee starts
one torch-importing child.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rankvisor import engine
from rankvisor.engine.errors import ChildFailedError

from tests.conftest import BIN, PYTHON, pid_alive, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.torch]


def _both(torch_mp: Any) -> list[tuple[str, Any]]:
    return [("torch", torch_mp), ("engine", engine)]


def _run(impl: Any, log_dir: Path, scripts: dict[int, list[str]], **kw: Any) -> Any:
    """Run python ``scripts`` (by rank) under ``impl``; return (context, result)."""
    specs = {k: kw.pop(k) for k in ("redirects", "tee", "local_ranks_filter") if k in kw}
    for k in ("redirects", "tee"):
        if k in specs and not isinstance(specs[k], dict):
            specs[k] = impl.Std(int(specs[k]))
    ctx = impl.start_processes(
        name="w",
        entrypoint=PYTHON,
        args={r: tuple(argv) for r, argv in scripts.items()},
        envs={r: {"LOCAL_RANK": str(r)} for r in scripts},
        logs_specs=impl.DefaultLogsSpecs(log_dir=str(log_dir), **specs),
        **kw,
    )
    return ctx, ctx.wait(period=0.05)


def _tree(result: Any, log_dir: Path) -> dict[str, bytes]:
    """Files of the run, relative to the run dir (whose name has a random suffix)."""
    (run_dir,) = [p for p in log_dir.iterdir() if p.is_dir()]
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def _rel(paths: dict[int, str], log_dir: Path) -> dict[int, str]:
    (run_dir,) = [p for p in log_dir.iterdir() if p.is_dir()]
    return {
        r: os.path.relpath(p, run_dir) if p.startswith(str(run_dir)) else p
        for r, p in paths.items()
    }


def _exit_with(*args: str) -> list[str]:
    return [str(BIN / "exit_with.py"), *args]


def test_success_log_tree_and_result(torch_mp: Any, tmp_path: Path) -> None:
    got = {}
    for name, impl in _both(torch_mp):
        log_dir = tmp_path / name
        _, result = _run(impl, log_dir, {0: _exit_with(), 1: _exit_with()}, redirects={0: 3, 1: 1})
        got[name] = (
            _tree(result, log_dir),
            result.return_values,
            result.failures,
            _rel(result.stdouts, log_dir),
            _rel(result.stderrs, log_dir),
        )
    assert got["torch"] == got["engine"]
    tree = got["engine"][0]
    assert tree == {
        "attempt_0/0/stdout.log": b"out from rank 0\n",
        "attempt_0/0/stderr.log": b"err from rank 0\n",
        "attempt_0/1/stdout.log": b"out from rank 1\n",
    }
    assert got["engine"][1] == {0: None, 1: None}


@pytest.mark.parametrize(
    ("args", "exitcode"),
    [(["--code", "3"], 3), (["--signal", "SIGKILL"], -9), (["--signal", "SIGSEGV"], -11)],
)
def test_failures_same_codes_messages_and_keys(
    torch_mp: Any, tmp_path: Path, args: list[str], exitcode: int
) -> None:
    """Rank 1 fails; rank 0 would run on and is torn down. torch lists both as failures;
    we list the rank our teardown killed apart, as stopped, with the same record."""
    got = {}
    for name, impl in _both(torch_mp):
        _, result = _run(
            impl,
            tmp_path / name,
            {0: _exit_with("--sleep", "600"), 1: _exit_with(*args)},
            redirects=3,
        )
        got[name] = result
    theirs, ours = got["torch"], got["engine"]
    assert set(theirs.failures) == {0, 1} and theirs.return_values == {}
    assert set(ours.failures) == {1} and set(ours.stopped) == {0} and ours.return_values == {}
    for result, killed in ((theirs, theirs.failures[0]), (ours, ours.stopped[0])):
        assert result.failures[1].exitcode == exitcode
        assert killed.exitcode == -signal.SIGTERM
        for f in (result.failures[1], killed):
            assert f.error_file == "<N/A>"
    t1, e1 = theirs.failures[1], ours.failures[1]
    assert e1.message == t1.message.replace(str(t1.pid), str(e1.pid))
    assert e1.signal_name() == t1.signal_name()
    assert e1.error_file_data["message"] == t1.error_file_data["message"] == "<NONE>"
    assert ("errorTraits" in e1.error_file_data) == (exitcode > 0)
    # torch cannot tell its own teardown kill from the real failure; we can.
    assert not hasattr(theirs.failures[0], "caused_by_us")
    assert ours.stopped[0].caused_by_us and not e1.caused_by_us
    assert ChildFailedError("w", ours.failures).get_first_failure()[0] == 1


def test_recorded_exception_same_error_json(torch_mp: Any, tmp_path: Path) -> None:
    got = {}
    for name, impl in _both(torch_mp):
        _, result = _run(
            impl, tmp_path / name, {0: [str(BIN / "raise_recorded.py"), "x"]}, redirects=3
        )
        got[name] = result.failures[0]
    t, e = got["torch"], got["engine"]
    assert t.message["message"] == e.message["message"] == "ValueError: x"
    assert set(t.error_file_data) == set(e.error_file_data) == {"message"}
    assert t.exitcode == e.exitcode == 1


def test_validation_errors_are_the_same(torch_mp: Any, tmp_path: Path) -> None:
    cases = [
        ({0: (), 1: ()}, {0: {}}),
        ({0: (), 2: ()}, {0: {}, 1: {}}),
    ]
    for args, envs in cases:
        errors = []
        for name, impl in _both(torch_mp):
            with pytest.raises(RuntimeError) as info:
                impl.start_processes(
                    "w", PYTHON, args, envs, impl.DefaultLogsSpecs(log_dir=str(tmp_path / name))
                )
            errors.append(str(info.value))
        assert errors[0] == errors[1]


def test_missing_binary(torch_mp: Any, tmp_path: Path) -> None:
    """Both raise FileNotFoundError naming the path; ours also names the rank."""
    program = str(tmp_path / "nope")
    messages = {}
    for name, impl in _both(torch_mp):
        with pytest.raises(FileNotFoundError) as info:
            impl.start_processes(
                "w", program, {0: ()}, {0: {}}, impl.DefaultLogsSpecs(log_dir=str(tmp_path / name))
            )
        messages[name] = str(info.value)
    assert program in messages["torch"] and program in messages["engine"]
    assert "local rank 0" in messages["engine"]


STD_TABLE = [
    "0",
    "1",
    "2",
    "3",
    "1\n",
    " 1",
    "4",
    "",
    "0:3",
    "0:3,1:0,2:1,3:2",
    "0:1,0:2",
    "0:4",
    "0:1,",
    "a:1",
    "0:1;1:2",
    "10:1",
    "0:1,12:3",
]


def test_std_parsing_table(torch_mp: Any) -> None:
    """Same results everywhere, except multi-digit local ranks (torch rejects them)."""
    for text in STD_TABLE:
        try:
            theirs: Any = torch_mp.Std.from_str(text)
        except ValueError:
            theirs = ValueError
        try:
            ours: Any = engine.Std.from_str(text)
        except ValueError:
            ours = ValueError
        if text in ("10:1", "0:1,12:3"):
            assert theirs is ValueError and ours is not ValueError
            continue
        if isinstance(theirs, dict):
            theirs = {k: int(v) for k, v in theirs.items()}
            ours = {k: int(v) for k, v in ours.items()}
        elif theirs is not ValueError:
            theirs, ours = int(theirs), int(ours)
        assert theirs == ours, text
    for value in (torch_mp.Std.OUT, {1: torch_mp.Std.ERR, 7: torch_mp.Std.ALL}):
        ours_value = (
            engine.Std(int(value))
            if not isinstance(value, dict)
            else {k: engine.Std(int(v)) for k, v in value.items()}
        )
        assert {k: int(v) for k, v in torch_mp.to_map(value, 3).items()} == {
            k: int(v) for k, v in engine.to_map(ours_value, 3).items()
        }


def test_tee_prefixes_and_filtered_files(
    torch_mp: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    say = str(BIN / "say.py")
    scripts = {
        0: [say, "out:apple keep", "err:pear e0", "out:plain"],
        1: [say, "out:apple too", "err:e1"],
    }
    got = {}
    for name, impl in _both(torch_mp):
        capfd.readouterr()
        log_dir = tmp_path / name
        _, result = _run(
            impl,
            log_dir,
            scripts,
            tee=3,
            log_line_prefixes={1: "[custom]:"},
            duplicate_stdout_filters=["apple"],
            duplicate_stderr_filters=["pear"],
        )
        out, err = capfd.readouterr()
        tree = _tree(result, log_dir)
        got[name] = (
            sorted(out.splitlines()),
            sorted(err.splitlines()),
            sorted(tree["attempt_0/filtered_stdout.log"].decode().splitlines()),
            sorted(tree["attempt_0/filtered_stderr.log"].decode().splitlines()),
            sorted(tree),
        )
    assert got["torch"] == got["engine"]
    assert got["engine"][0] == ["[custom]:apple too", "[w0]:apple keep", "[w0]:plain"]
    assert got["engine"][2] == ["[custom]:apple too", "[w0]:apple keep"]
    assert got["engine"][3] == ["[w0]:pear e0"]


# -- torch's defects, side by side ------------------------------------------------------


def test_local_ranks_filter_torch_loses_the_output_ours_keeps_it_on_disk(
    torch_mp: Any, tmp_path: Path
) -> None:
    dests = {}
    for name, impl in _both(torch_mp):
        dests[name] = impl.DefaultLogsSpecs(
            log_dir=str(tmp_path / name),
            redirects={0: impl.Std.OUT},
            tee={1: impl.Std.ERR},
            local_ranks_filter={0},
        ).reify({0: {}, 1: {}, 2: {}})
    t, e = dests["torch"], dests["engine"]
    assert t.stdouts[1] == t.stdouts[2] == t.stderrs[2] == os.devnull  # lost
    assert e.stdouts[1].endswith("1/stdout.log") and e.stderrs[2].endswith("2/stderr.log")
    assert t.tee_stderrs == e.tee_stderrs == {}


def test_second_reify_torch_wipes_the_attempt_ours_moves_it_aside(
    torch_mp: Any, tmp_path: Path
) -> None:
    kept = {}
    for name, impl in _both(torch_mp):
        specs = impl.DefaultLogsSpecs(log_dir=str(tmp_path / name), redirects=impl.Std.OUT)
        first = specs.reify({0: {}})
        Path(first.stdouts[0]).write_text("precious")
        specs.reify({0: {}})
        run_dir = Path(first.stdouts[0]).parent.parent.parent
        kept[name] = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("stdout.log"))
    assert kept["torch"] == []
    assert kept["engine"] == ["attempt_0.old1/0/stdout.log"]


def test_devnull_log_dir_with_filters_fails_in_torch_not_here(
    torch_mp: Any, tmp_path: Path
) -> None:
    def run(impl: Any) -> Any:
        ctx = impl.start_processes(
            "w",
            "true",
            {0: ()},
            {0: {}},
            impl.DefaultLogsSpecs(log_dir=os.devnull),
            duplicate_stdout_filters=["x"],
        )
        return ctx.wait(period=0.05)

    with pytest.raises(NotADirectoryError):
        run(torch_mp)
    assert not run(engine).is_failed()


def test_failure_starting_rank_1_leaks_rank_0_in_torch_not_here(
    torch_mp: Any, tmp_path: Path
) -> None:
    marker = "599.25"  # a unique argument, to find torch's leaked rank
    contexts = {}
    for name, impl in _both(torch_mp):
        ctx = impl.SubprocessContext(
            name="w",
            entrypoint="sleep",
            args={0: (marker,), 1: (marker,)},
            envs={0: {}, 1: {"BAD": "nul\0byte"}},  # Popen refuses rank 1's environment
            logs_specs=impl.DefaultLogsSpecs(log_dir=str(tmp_path / name)),
        )
        with pytest.raises(ValueError):
            ctx.start()
        ctx.close()
        contexts[name] = ctx
    # Popen returns once the child's exec has closed its pipe, a moment before the kernel
    # sets the new program's arguments: read in that moment, /proc/<pid>/cmdline is empty.
    leaked: list[int] = []
    try:
        wait_until(lambda: _children_with_last_arg(marker), timeout=10)
        leaked = _children_with_last_arg(marker)
        # torch never recorded rank 0 (its handlers dict is built in one comprehension),
        # so its close() could not reach it: it is still running.
        assert contexts["torch"].pids() == {}
        assert len(leaked) == 1, leaked
        ours_rank0 = contexts["engine"].pids()[0]
        assert ours_rank0 not in leaked and not pid_alive(ours_rank0)
    finally:
        for pid in set(leaked) | set(_children_with_last_arg(marker)):
            os.kill(pid, signal.SIGKILL)


def _children_with_last_arg(arg: str) -> list[int]:
    """Our live children whose command line ends with ``arg``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")[:-1]
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and cmd and cmd[-1] == arg.encode() and pid_alive(int(name)):
            found.append(int(name))
    return found


def test_signal_handlers_after_close_torch_leaves_them_ours_restored(
    torch_mp: Any, tmp_path: Path
) -> None:
    after = {}
    for name, impl in _both(torch_mp):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        ctx, _ = _run(impl, tmp_path / name, {0: _exit_with()})
        ctx.close()
        after[name] = signal.getsignal(signal.SIGTERM)
    assert after["torch"] is not signal.SIG_DFL  # left installed for ever
    assert after["engine"] is signal.SIG_DFL


def test_log_files_of_exited_ranks_stay_open_in_torch_not_here(
    torch_mp: Any, tmp_path: Path
) -> None:
    growth = {}
    contexts = []  # kept alive, so that garbage collection does not close files for torch
    for name, impl in _both(torch_mp):
        before = len(os.listdir("/proc/self/fd"))
        ctx = impl.start_processes(
            "w",
            PYTHON,
            {0: (str(BIN / "say.py"), "out:x")},
            {0: {}},
            impl.DefaultLogsSpecs(log_dir=str(tmp_path / name), redirects=impl.Std.ALL),
        )
        pid = ctx.pids()[0]
        wait_until(lambda pid=pid: not pid_alive(pid))
        ctx.wait(period=0.05)  # the rank exited by itself: close() has nothing to signal
        growth[name] = len(os.listdir("/proc/self/fd")) - before
        contexts.append(ctx)
    assert growth["torch"] == 2  # its stdout.log and stderr.log
    assert growth["engine"] == 0
    for ctx in contexts:
        ctx.close()


def test_forgotten_close_with_tee_hangs_torch_at_exit_not_ours(tmp_path: Path) -> None:
    """torch's interpreter never exits; ours exits and takes its rank along."""
    program = """
import sys
impl = __import__(sys.argv[1], fromlist=["start_processes"])
ctx = impl.start_processes("w", "sleep", {0: ("600",)}, {0: {}},
                           impl.DefaultLogsSpecs(log_dir=sys.argv[2], tee=impl.Std.ALL))
print(ctx.pids()[0], flush=True)
"""
    procs = {}
    for name, module in (
        ("torch", "torch.distributed.elastic.multiprocessing"),
        ("engine", "engine"),
    ):
        procs[name] = subprocess.Popen(
            [sys.executable, "-c", program, module, str(tmp_path / name)],
            stdout=subprocess.PIPE,
            text=True,
        )
    rank = {}
    for name, proc in procs.items():
        assert proc.stdout is not None
        rank[name] = int(proc.stdout.readline())  # the script has reached its end
    try:
        assert procs["engine"].wait(60) == 0
        wait_until(lambda: not pid_alive(rank["engine"]))
        # Bounded look at the hang: ours exited above within the same kind of wait.
        with pytest.raises(subprocess.TimeoutExpired):
            procs["torch"].wait(3)
        assert pid_alive(rank["torch"])
    finally:
        procs["torch"].kill()
        procs["torch"].wait(30)
        if pid_alive(rank["torch"]):
            os.kill(rank["torch"], signal.SIGKILL)


def test_closing_a_handler_whose_rank_was_reaped(torch_mp: Any, tmp_path: Path) -> None:
    """torch's SubprocessHandler.close() raises ProcessLookupError for a reaped rank."""
    from rankvisor.engine.subprocess_handler import get_subprocess_handler as our_handler
    from torch.distributed.elastic.multiprocessing.subprocess_handler import (
        get_subprocess_handler as torch_handler,
    )

    theirs = torch_handler("true", (), {}, "", "", 0)
    theirs.proc.wait(30)
    with pytest.raises(ProcessLookupError):
        theirs.close()
    mine = our_handler("true", (), {}, "", "", 0)
    mine.rank_process.wait(30)
    mine.close()  # nothing to signal, nothing raised


def test_numa_binding_without_numactl_or_cuda(torch_mp: Any, tmp_path: Path) -> None:
    """torch needs numactl and CUDA to bind; we bind a CPU-only rank from sysfs."""
    from torch.numa.binding import AffinityMode, NumaOptions

    options = NumaOptions(AffinityMode.NODE)  # torch's own object, accepted by both
    with pytest.raises(AssertionError):  # Torch not compiled with CUDA enabled
        torch_mp.start_processes(
            "w",
            "sleep",
            {0: ("600",)},
            {0: {}},
            torch_mp.DefaultLogsSpecs(log_dir=str(tmp_path / "torch")),
            numa_options=options,
        )
    ctx = engine.start_processes(
        "w",
        "sleep",
        {0: ("600",)},
        {0: {}},
        engine.DefaultLogsSpecs(log_dir=str(tmp_path / "engine")),
        numa_options=options,
    )
    try:
        from rankvisor.engine.process import numa

        expected = numa.plan(options, 1)[0]
        assert expected and os.sched_getaffinity(ctx.pids()[0]) == set(expected)
    finally:
        ctx.close()
