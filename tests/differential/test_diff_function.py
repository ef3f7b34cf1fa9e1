"""Function ranks through torch's start_processes and ours, in one run, compared.

Where the two agree (return values, exit codes, error.json schema, signal messages, the log
tree, C-level redirects) the test asserts equality; where we fix a torch defect (the
redirect's timing, every failure reported, exit 0 without returning, grandchildren on close)
it asserts torch's observed behaviour and ours side by side.

Each torch child imports torch (about 2 s here), so scenarios share children where they can:
eight torch children in all.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Callable

import pytest
from rankvisor import engine
from rankvisor.engine.errors import ChildFailedError

from tests.conftest import pid_alive, wait_until
from tests.engine import mp_funcs

pytestmark = [pytest.mark.processes, pytest.mark.torch]


def _run(
    impl: Any,
    tmp_path: Path,
    fn: Callable[..., Any],
    args: dict[int, tuple[Any, ...]],
    redirects: int = 3,
) -> Any:
    """Start ``fn`` under ``impl`` (torch's module or ``engine``); return the context."""
    return impl.start_processes(
        name="trainer",
        entrypoint=fn,
        args=args,
        envs={r: {"LOCAL_RANK": str(r)} for r in args},
        logs_specs=impl.DefaultLogsSpecs(
            log_dir=str(tmp_path / impl.__name__.split(".")[0]), redirects=impl.Std(redirects)
        ),
        start_method="spawn",
    )


def _wait_dead(ctx: Any, ranks: list[int]) -> None:
    """Wait until ``ranks`` have died by themselves, before either side polls."""
    pids = ctx.pids()
    # torch's ranks import torch first: give them time, bounded.
    wait_until(lambda: not any(pid_alive(pids[r]) for r in ranks), timeout=90)


def _tree(ctx: Any) -> set[str]:
    """The files of the attempt directory, relative to it."""
    attempt = Path(ctx.stdouts[0]).parent.parent
    return {str(p.relative_to(attempt)) for p in attempt.rglob("*") if p.is_file()}


def test_success_return_values_logs_and_c_level_redirect(
    torch_mp: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    args = {0: (0,), 1: (1,)}
    theirs = _run(torch_mp, tmp_path, mp_funcs.all_outputs, args)
    their_result = theirs.wait(timeout=120, period=0.1)
    their_console = capfd.readouterr().out
    ours = _run(engine, tmp_path, mp_funcs.all_outputs, args)
    our_result = ours.wait(timeout=60)
    our_console = capfd.readouterr().out

    assert their_result.return_values == our_result.return_values == {0: 0, 1: 1}
    assert not their_result.failures and not our_result.failures
    assert (
        _tree(theirs)
        == _tree(ours)
        == {"0/stdout.log", "0/stderr.log", "1/stdout.log", "1/stderr.log"}
    )
    for rank in args:
        their_out = Path(theirs.stdouts[rank]).read_text().splitlines()
        our_out = Path(ours.stdouts[rank]).read_text().splitlines()
        # Python print, C printf and os.system output all reach the file in both. (Order
        # may differ: torch's child block-buffers Python's stdout, ours line-buffers it.)
        expected = {f"python stdout {rank}", f"c printf {rank}", f"os.system {rank}"}
        assert set(their_out) == expected
        # The import of the function's module happens after our redirect; torch's child
        # unpickles (imports) it first, so its output went to the parent's console.
        assert our_out[0].startswith(mp_funcs.IMPORT_MARK) and set(our_out[1:]) == expected
        assert Path(theirs.stderrs[rank]).read_text() == Path(ours.stderrs[rank]).read_text()
    assert their_console.count(mp_funcs.IMPORT_MARK) == 2
    assert mp_funcs.IMPORT_MARK not in our_console


def test_raise_and_sys_exit_all_failures_and_tracebacks(torch_mp: Any, tmp_path: Path) -> None:
    go = tmp_path / "go"
    go.touch()  # no need to wait: both ranks fail as soon as they run
    args = {0: (str(go), "raise", 7), 1: (str(go), "exit", 3)}
    theirs = _run(torch_mp, tmp_path, mp_funcs.wait_for_file_then, args)
    _wait_dead(theirs, [0, 1])
    their_failures = theirs.wait(timeout=60, period=0.1).failures
    ours = _run(engine, tmp_path, mp_funcs.wait_for_file_then, args)
    _wait_dead(ours, [0, 1])
    our_failures = ours.wait(timeout=60).failures

    # torch reports one failure although both ranks failed; we report both.
    assert len(their_failures) == 1
    assert sorted(our_failures) == [0, 1]
    for rank, failure in their_failures.items():
        assert failure.exitcode == our_failures[rank].exitcode
    assert our_failures[0].exitcode == 1 and our_failures[1].exitcode == 3
    assert not any(f.caused_by_us for f in our_failures.values())

    # error.json of the raising rank: same schema, same message.
    their_json = torch_mp.ProcessFailure(0, 1, 1, theirs.error_files[0]).error_file_data
    our_json = our_failures[0].error_file_data
    assert their_json.keys() == our_json.keys() == {"message"}
    assert their_json["message"].keys() == our_json["message"].keys()
    assert their_json["message"]["extraInfo"].keys() == our_json["message"]["extraInfo"].keys()
    assert their_json["message"]["message"] == our_json["message"]["message"]
    assert our_json["message"]["message"] == "RuntimeError: failure 7"
    # sys.exit(3) writes no error file in either.
    assert not Path(theirs.error_files[1]).exists() and not Path(ours.error_files[1]).exists()

    # torch undoes the redirect before the traceback is printed; ours keeps it.
    assert "Traceback" not in Path(theirs.stderrs[0]).read_text()
    our_err = Path(ours.stderrs[0]).read_text()
    assert "Traceback (most recent call last)" in our_err
    assert our_err.endswith("RuntimeError: failure 7\n")


def test_sigkill_and_sigsegv_deaths(torch_mp: Any, tmp_path: Path) -> None:
    args = {0: (int(signal.SIGKILL),), 1: (int(signal.SIGSEGV),)}
    theirs = _run(torch_mp, tmp_path, mp_funcs.kill_self, args)
    _wait_dead(theirs, [0, 1])
    their_failures = theirs.wait(timeout=60, period=0.1).failures
    ours = _run(engine, tmp_path, mp_funcs.kill_self, args)
    _wait_dead(ours, [0, 1])
    our_failures = ours.wait(timeout=60).failures

    assert len(their_failures) == 1 and sorted(our_failures) == [0, 1]
    sigs = {0: signal.SIGKILL, 1: signal.SIGSEGV}
    for rank, failure in {**their_failures, **our_failures}.items():
        sig = sigs[rank]
        assert failure.exitcode == -sig
        assert failure.message == f"Signal {int(sig)} ({sig.name}) received by PID {failure.pid}"
        assert failure.error_file == "<N/A>"
    # faulthandler (enabled by record) dumps the stack into stderr.log in both.
    assert "Segmentation fault" in Path(ours.stderrs[1]).read_text()


def test_os_exit_zero_torch_never_finishes_ours_fails(torch_mp: Any, tmp_path: Path) -> None:
    theirs = _run(torch_mp, tmp_path, mp_funcs.hard_exit_zero, {0: ()})
    try:
        _wait_dead(theirs, [0])
        # The rank is gone with exit code 0, yet torch's poll sees neither success nor
        # failure, so wait() would never return.
        assert theirs.wait(timeout=0) is None
        assert theirs.wait(timeout=0.5, period=0.1) is None
    finally:
        theirs.close(timeout=5)
    result = _run(engine, tmp_path, mp_funcs.hard_exit_zero, {0: ()}).wait(timeout=60)
    failure = result.failures[0]
    assert failure.exitcode == 0
    assert "without returning from hard_exit_zero" in str(failure.message)
    assert str(ChildFailedError("trainer", result.failures)).count("without returning") == 1


def test_close_kills_grandchildren_torch_leaves_them(torch_mp: Any, tmp_path: Path) -> None:
    their_file, our_file = tmp_path / "theirs.pid", tmp_path / "ours.pid"
    theirs = _run(torch_mp, tmp_path, mp_funcs.with_grandchild, {0: (str(their_file),)})
    ours = _run(engine, tmp_path, mp_funcs.with_grandchild, {0: (str(our_file),)})
    wait_until(lambda: their_file.exists() and our_file.exists(), timeout=90)
    their_grandchild, our_grandchild = int(their_file.read_text()), int(our_file.read_text())
    try:
        theirs.close(timeout=5)
        ours.close(timeout=5)
        assert not pid_alive(theirs.pids()[0]) and not pid_alive(ours.pids()[0])
        # torch signals the rank's pid only; its grandchild lives on.
        assert pid_alive(their_grandchild)
        wait_until(lambda: not pid_alive(our_grandchild))
    finally:
        if pid_alive(their_grandchild):
            os.kill(their_grandchild, signal.SIGKILL)  # clean up what torch left behind


def test_redirect_rejects_unknown_streams_with_torchs_message(
    torch_mp: Any, tmp_path: Path
) -> None:
    from rankvisor.engine import redirects
    from torch.distributed.elastic.multiprocessing import redirects as torch_redirects

    messages = []
    for module in (torch_redirects, redirects):
        with pytest.raises(ValueError) as info:
            with module.redirect("stdin", str(tmp_path / "x.log")):
                pass
        messages.append(str(info.value))
    # The set's repr may list the two names in either order, in both implementations.
    normalise = [m.replace("'stderr', 'stdout'", "'stdout', 'stderr'") for m in messages]
    assert normalise[0] == normalise[1]
    assert messages[1].startswith("unknown standard stream <stdin>, must be one of")
