"""``rankvisor``: bad input refused in one line before anything starts; headless runs."""

from __future__ import annotations

import importlib
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import BIN, pid_alive, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo]

ROOT = Path(__file__).parents[1]
SV_RANK = str(BIN / "sv_rank.py")


def rankvisor(*args: str, timeout: float = 60, env: dict[str, str] | None = None,
              prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "rankvisor.tui", *args], cwd=ROOT, capture_output=True,
        text=True, timeout=timeout, env=env,
    )


def assert_refused(res: subprocess.CompletedProcess[str], *words: str) -> None:
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("rankvisor"), lines
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert res.stdout == ""


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["run", "--headless", "missing_script.py"], ["missing_script.py", "does not exist"]),
        (["run", "-r", "0:3,x", SV_RANK], ["--redirects", "'x'"]),
        (["run", "-t", "0:3,1:9", SV_RANK], ["--tee", "'1:9'"]),
        (["run", "--local-ranks-filter", "0,a", SV_RANK], ["--local-ranks-filter", "'a'"]),
        (["run", "--nproc-per-node", "2", "--local-ranks-filter", "5", SV_RANK], ["rank 5"]),
        (["run", "--nproc-per-node", "0", SV_RANK], ["--nproc-per-node", "at least 1"]),
        (["run", "--nproc-per-node", "four", SV_RANK], ["--nproc-per-node", "'four'"]),
        (["run", "--nnodes", "2", "--rdzv-backend", "c10d", SV_RANK],
         ["--rdzv-backend c10d", "--rdzv-endpoint"]),
        (["run", "--no-python", "no-such-program-xyz"], ["no-such-program-xyz", "not found"]),
        (["run", "-m", "no_such_module_xyz"], ["no_such_module_xyz"]),
        (["run", "--max-restarts", "x", SV_RANK], ["--max-restarts"]),
        (["run"], ["script"]),
        (["run", str(BIN)], ["is a directory", "Python file"]),
        (["run", "--nproc-per-node", "-2", SV_RANK], ["'-2'", "whole number of at least 1"]),
        (["run", "-r", "0:9x", SV_RANK], ["--redirects", "'0:9x'", "0:3,1:0"]),
        (["run", "--progress-regex", "step=(", SV_RANK],
         ["--progress-regex", "not a regular expression"]),
        (["demo", "--progress-regex", r"(?P<a>\d+)/(?P<b>\d+)"],
         ["--progress-regex", "(?P<step>...)"]),
    ],
)
def test_bad_input_is_one_line_and_status_2(argv: list[str], words: list[str]) -> None:
    assert_refused(rankvisor(*argv), *words)


def test_a_redirect_error_shows_no_regex() -> None:
    res = rankvisor("run", "-r", "0:9x", SV_RANK)
    assert "<^" not in res.stderr and "$>" not in res.stderr


def test_version_is_printed_not_run() -> None:
    from importlib.metadata import version

    for flag in ("--version", "-V"):
        res = rankvisor(flag)
        assert res.returncode == 0 and res.stdout == f"rankvisor {version('rankvisor')}\n"


def test_nproc_gpu_imports_torch_without_its_numpy_warning(tmp_path: Path) -> None:
    """A fresh environment has no NumPy: torch's import warns about it, which has nothing
    to do with counting GPUs (here: NumPy hidden from the child by a shim, as if missing)."""
    shim = tmp_path / "numpy"
    shim.mkdir()
    missing = "raise ModuleNotFoundError('No module named numpy', name='numpy')\n"
    (shim / "__init__.py").write_text(missing)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    res = rankvisor("run", "--nproc-per-node", "gpu", SV_RANK, env=env)
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert line == "rankvisor: error: --nproc-per-node gpu: no GPU is available"


def test_log_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    assert_refused(rankvisor("run", "--log-dir", str(f), SV_RANK), "is a file")
    assert_refused(rankvisor("run", "--log-dir", str(f / "sub"), SV_RANK), "is a file")


def test_log_dir_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    if os.geteuid() != 0:
        res = rankvisor("run", "--log-dir", str(locked / "logs"), SV_RANK)
        assert_refused(res, "cannot create it")
        assert_refused(rankvisor("run", "--log-dir", str(locked), SV_RANK), "not writable")
        return
    # root may write anywhere, so make the permission check see what a user would see.
    from rankvisor.tui.cli import main

    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p) == str(locked) else real_access(p, mode)
    )
    for log_dir, words in ((locked / "logs", "cannot create it"), (locked, "not writable")):
        assert main(["run", "--log-dir", str(log_dir), SV_RANK]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = rankvisor(
            "run", "--master-port", str(port), "--log-dir", str(tmp_path / "l"), SV_RANK
        )
    assert_refused(res, str(port), "already in use")
    assert not (tmp_path / "l").exists()  # nothing started, nothing created


def test_headless_success_prints_prefixed_lines(tmp_path: Path) -> None:
    res = rankvisor(
        "--nproc_per_node", "2", "--headless", "--log-dir", str(tmp_path), "--role", "w",
        SV_RANK, "--print", "2", "--exit", "0",
    )
    assert res.returncode == 0, res.stderr
    out = sorted(res.stdout.splitlines())
    assert "[w0]:line 0 from rank 0" in out and "[w1]:line 1 from rank 1" in out
    (run_dir,) = tmp_path.iterdir()
    assert (run_dir / "attempt_0" / "1" / "stdout.log").read_text().startswith("line 0 from rank 1")


def test_redirect_tee_filter_and_prefix_template(tmp_path: Path) -> None:
    res = rankvisor(
        "run", "--headless", "--nproc-per-node", "3", "--log-dir", str(tmp_path),
        "-r", "3", "-t", "0:1,2:1", "--local-ranks-filter", "0,1",
        "--log-line-prefix-template", "<${role_name}:${rank}>",
        "--filter-stdout", "line 1", "--filter-stdout", "line 1",
        SV_RANK, "--print", "2", "--exit", "0",
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    # Rank 0 is tee'd; rank 1 is redirected only; rank 2 is filtered off the console.
    assert "<default:0>line 0 from rank 0" in out
    assert not [ln for ln in out if ":1>" in ln or ":2>" in ln]
    (run_dir,) = tmp_path.iterdir()
    for r in range(3):  # the files have everything, whatever the console shows
        assert "line 1 from rank" in (run_dir / "attempt_0" / str(r) / "stdout.log").read_text()
    filtered = (run_dir / "attempt_0" / "filtered_stdout.log").read_text().splitlines()
    assert sorted(filtered) == [f"<default:{r}>line 1 from rank {r}" for r in range(3)]


def test_a_run_records_the_command_typed_and_logs_prints_both_streams(tmp_path: Path) -> None:
    """Issue 22: ``ls`` and ``bundle`` name the ``rankvisor run`` line a person typed (and the
    directory it was typed in); ``logs`` prints stderr too, in the order the lines came."""
    argv = ("run", "--headless", "--log-dir", str(tmp_path / "logs"), str(BIN / "say.py"),
            "out:first", "sleep:1", "err:INFO second", "sleep:1", "out:third")
    res = rankvisor(*argv)
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "logs").iterdir()
    status = __import__("json").loads((run_dir / "status.json").read_text())
    assert status["command"] == ["rankvisor", *argv] and status["cwd"] == str(ROOT)
    listed = rankvisor("ls")
    (row,) = [line for line in listed.stdout.splitlines() if line.endswith(str(run_dir))]
    assert "say.py out:first sleep:1" in row and " ok " in row
    logs = rankvisor("logs", str(run_dir))
    assert logs.returncode == 0 and logs.stdout == "first\nINFO second\nthird\n", logs


def test_failure_exits_1_with_the_root_cause_report(tmp_path: Path) -> None:
    res = rankvisor(
        "run", "--headless", "--nproc-per-node", "3", "--log-dir", str(tmp_path),
        "--term-timeout", "5", SV_RANK, "--raise", "rank one broke", "--only-rank", "1",
    )
    assert res.returncode == 1
    assert "rankvisor: root cause: rank 1 failed first (exit code 1)" in res.stderr
    assert "RuntimeError: rank one broke" in res.stderr
    # Issue 22: the suspect is the root cause: one line says both, the error once.
    head = "\n".join(ln for ln in res.stderr.split("Root Cause (first observed failure):")[0]
                     .splitlines() if ln.startswith("rankvisor:"))
    assert "rankvisor: suspect:" not in head and head.count("rank one broke") == 1, head
    assert "failed first (exit code 1): RuntimeError: rank one broke" in head
    report = res.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in report
    assert "error.json" in report


def test_a_rank_the_teardown_stopped_is_named_apart_not_as_a_failure(tmp_path: Path) -> None:
    res = rankvisor(
        "run", "--headless", "--nproc-per-node", "2", "--log-dir", str(tmp_path),
        "--term-timeout", "5", SV_RANK, "--exit", "3", "--only-rank", "1",
    )
    assert res.returncode == 1
    lines = res.stderr.splitlines()
    (root,) = [
        i for i, ln in enumerate(lines)
        if ln.startswith("rankvisor: root cause: rank 1 failed first (exit code 3)")
    ]
    # Rank 0 slept until the teardown after rank 1's failure SIGTERMed it: not a failure.
    stopped = "rankvisor: stopped by rankvisor, not failures: rank 0 (signal SIGTERM)"
    assert lines[root + 1] == stopped
    # torch's block lists it after the failure with its signal, as torchrun's does, and
    # names the rank that failed the root cause.
    failures, report = res.stderr.split("Root Cause (first observed failure):")
    assert "rank      : 1 (local_rank: 1)" in report and "rank      : 0" not in report
    assert "rank      : 0 (local_rank: 0)" in failures
    assert "traceback : Signal 15 (SIGTERM) received by PID" in failures


def test_serve_is_dispatched_to_tui_serve() -> None:
    # Our own module: a broken import fails the test. (``import rankvisor.tui...`` would bind
    # the name ``rankvisor`` here, over this file's helper of that name.)
    importlib.import_module("rankvisor.tui.cli.serve")

    res = rankvisor("serve", "--help")
    assert res.returncode == 0 and "usage:" in res.stdout


def test_help_mentions_the_torchrun_flags() -> None:
    res = rankvisor("run", "--help")
    assert res.returncode == 0
    for flag in ("--nproc-per-node", "--log-dir", "--redirects", "--tee", "--local-ranks-filter",
                 "--max-restarts", "--master-port", "--headless", "--term-timeout",
                 "--filter-stdout", "--no-unbuffered"):
        assert flag in res.stdout


def _tui_on_a_terminal(argv: list[str]) -> tuple[int, int]:
    """``rankvisor`` on a pseudo-terminal of its own (so the TUI runs): (pid, pty fd)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: rankvisor on a terminal, so the TUI runs
        os.chdir(ROOT)
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, argv)
    return pid, fd


def _end_terminal(pid: int, fd: int) -> None:
    """Whatever ``_tui_on_a_terminal`` started is gone, and its terminal closed."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    os.close(fd)


class _Screen:
    """What the terminal got; reading keeps it drained, or the app blocks writing to it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = bytearray()

    def read(self) -> bool:
        while select.select([self.fd], [], [], 0)[0]:
            try:
                self.data.extend(os.read(self.fd, 1 << 16))
            except OSError:
                return True
        return False


def _exit_of(pid: int, screen: _Screen) -> int:
    status: list[int] = []

    def exited() -> bool:
        screen.read()
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status.append(os.waitstatus_to_exitcode(st))
        return bool(done)

    wait_until(exited, timeout=30)
    return status[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_foreground_tui_on_a_signal_stops_the_ranks_and_exits(tmp_path: Path, sig: int) -> None:
    """The table's last row: the TUI with the supervisor inside ends the run with it."""
    import rankvisor.tui.app  # noqa: F401 - our own module: a broken import fails, never skips  # noqa: F401
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    pid, fd = _tui_on_a_terminal(
        [sys.executable, "-m", "rankvisor.tui", "run", "--foreground", "--nproc-per-node", "2",
         "--term-timeout", "3", "--log-dir", str(tmp_path / "logs"), SV_RANK,
         "--pid-dir", str(pid_dir), "--child", "both"])
    screen = _Screen(fd)
    try:
        wait_until(lambda: screen.read() or len(list(pid_dir.glob("*.pids"))) == 2, timeout=60)
        pids = [int(x) for f in pid_dir.glob("*.pids") for x in f.read_text().split()]
        assert len(pids) == 6
        wait_until(lambda: screen.read() or b"running" in screen.data, timeout=30)
        os.kill(pid, sig)
        status = _exit_of(pid, screen)
        if sig == signal.SIGINT:
            # Left to the app's event loop (it ends the app, which shuts the ranks down).
            assert status != 0
        else:
            assert status == 128 + sig
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=15)
        assert b"\x1b[?1049l" in screen.data  # the app left the alternate screen
    finally:
        _end_terminal(pid, fd)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_viewer_ends_on_a_signal_and_the_run_goes_on(tmp_path: Path, sig: int) -> None:
    """The table's first row: the default ``run`` is a viewer of a supervisor process; a
    signal (or a lost terminal) ends the viewer only. ``stop`` then ends the run, with no
    process of it left."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    log_dir = tmp_path / "logs"
    pid, fd = _tui_on_a_terminal(
        [sys.executable, "-m", "rankvisor.tui", "run", "--nproc-per-node", "2",
         "--term-timeout", "3", "--log-dir", str(log_dir), SV_RANK, "--pid-dir", str(pid_dir),
         "--child", "both"])
    screen = _Screen(fd)
    pids: list[int] = []
    try:
        wait_until(lambda: screen.read() or len(list(pid_dir.glob("*.pids"))) == 2, timeout=60)
        pids = [int(x) for f in pid_dir.glob("*.pids") for x in f.read_text().split()]
        assert len(pids) == 6
        wait_until(lambda: screen.read() or b"running" in screen.data, timeout=30)
        os.kill(pid, sig)
        status = _exit_of(pid, screen)
        assert status in (0, 128 + sig) or sig == signal.SIGINT
        assert all(pid_alive(p) for p in pids), "the run must outlive its viewer"
        run_dir = next(log_dir.iterdir())
        supervisor = int(__import__("json").loads((run_dir / "status.json").read_text())[
            "supervisor_pid"])
        res = rankvisor("stop", str(run_dir))
        assert res.returncode == 0, res.stderr
        wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=15)
        wait_until(lambda: not pid_alive(supervisor), timeout=30)
    finally:
        _end_terminal(pid, fd)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_demo_runs_e_s_job_with_its_filters_through_the_run_path(tmp_path: Path) -> None:
    from rankvisor.tui.cli.run_args import build_demo_parser, demo_config

    args = build_demo_parser().parse_args(
        ["--log-dir", str(tmp_path), "-t", "3", "--term-timeout", "4", "--headless"]
    )
    cfg = demo_config(args)
    assert cfg.nprocs == 4 and cfg.term_timeout == 4 and args.headless
    assert cfg.args[-1].endswith("demo_job.py") and cfg.entrypoint == sys.executable
    assert "WARNING" in cfg.stderr_filters
    assert cfg.console(0) == (True, True)


def test_demo_term_timeout_defaults_to_10_s_and_can_be_overridden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rankvisor.tui.cli.run_args import build_demo_parser, build_run_parser, demo_config

    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", raising=False)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"}
    res = rankvisor("demo", "--help", env=env)
    assert res.returncode == 0
    assert "(default 10," in " ".join(res.stdout.split()), res.stdout
    assert "(default 30," in " ".join(rankvisor("run", "--help", env=env).stdout.split())
    parse = build_demo_parser().parse_args
    assert demo_config(parse(["--log-dir", str(tmp_path)])).term_timeout == 10
    overridden = demo_config(parse(["--log-dir", str(tmp_path), "--term-timeout", "2.5"]))
    assert overridden.term_timeout == 2.5
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7")
    assert demo_config(parse(["--log-dir", str(tmp_path)])).term_timeout == 7
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    # ``run`` keeps torchrun's 30 s.
    from rankvisor.tui.cli.run_args import config_from_args

    run_args = build_run_parser().parse_args(["--log-dir", str(tmp_path), SV_RANK])
    assert config_from_args(run_args).term_timeout == 30


def test_printed_summary_after_terminate_all_blames_no_rank(tmp_path: Path) -> None:
    """What the CLI prints after the TUI, from a real run whose ranks rankvisor stopped."""
    from rankvisor.engine.entry.headless import exit_status, format_report
    from rankvisor.engine.handle import TerminateRanks
    from rankvisor.engine.supervisor import Supervisor
    from rankvisor.engine.supervisor.run_config import SupervisorConfig
    from rankvisor.tui.model import RunView
    from rankvisor.tui.report import format_summary

    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    cfg = SupervisorConfig(
        entrypoint=sys.executable, args=("-u", SV_RANK, "--pid-dir", str(pid_dir)), nprocs=2,
        log_dir=str(tmp_path / "logs"), term_timeout=5.0, sample_interval=0,
    )
    events: list[object] = []
    with Supervisor(cfg) as sup:
        sup.subscribe(events.append)
        view = RunView(sup.snapshot())
        wait_until(lambda: len(list(pid_dir.glob("*.pids"))) == 2, timeout=30)
        assert sup.execute(TerminateRanks()).ok
        finished = sup.wait(timeout=30)
    assert finished is not None and finished.root_cause_rank is None
    # Nobody failed: both ranks are listed as stopped, and the run did not succeed.
    assert finished.result.failures == {} and not finished.result.is_failed()
    assert sorted(finished.result.stopped) == [0, 1]
    assert all(f.caused_by_us for f in finished.result.stopped.values())
    assert exit_status(finished, None) == 1
    report = format_report("sv_rank.py", finished)
    assert report.startswith(
        "rankvisor: no root cause: the run was stopped by rankvisor (rank(s) 0, 1)\n"
    )
    assert "every failed rank was stopped by rankvisor" in report
    for event in list(events):
        view.apply(event)  # type: ignore[arg-type]
    text = format_summary(view)
    assert "no root cause: the run was stopped by rankvisor" in text, text
    assert "root cause: rank" not in text
    assert "stopped by rankvisor: rank 0" in text and "stopped by rankvisor: rank 1" in text


def test_signals_to_handle_and_numa_binding_flags(tmp_path: Path) -> None:
    assert_refused(rankvisor("run", "--signals-to-handle", "SIGTERM,SIGFOO", SV_RANK), "'SIGFOO'")
    assert_refused(rankvisor("run", "--signals-to-handle", "SIGKILL", SV_RANK), "SIGKILL")
    assert_refused(rankvisor("run", "--signals-to-handle", "TERM,999", SV_RANK),
                   "'999' is not a signal number")
    assert_refused(rankvisor("run", "--logs-specs", "custom", SV_RANK), "--logs-specs")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
         "--numa-binding", "node", "--signals-to-handle", "SIGUSR1", "--term-timeout", "3",
         "--log-dir", str(tmp_path / "logs"), SV_RANK, "--pid-dir", str(pid_dir)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        wait_until(lambda: len(list(pid_dir.glob("*.pids"))) == 2, timeout=30)
        from rankvisor.engine.process.numa import AffinityMode, NumaOptions, plan

        cpus = plan(NumaOptions(AffinityMode.NODE), 2)
        for r in range(2):
            (pid,) = [int(x) for x in (pid_dir / f"{r}.0.pids").read_text().split()]
            assert os.sched_getaffinity(pid) == cpus[r]
        # A SLURM-style preemption signal, declared as handled, stops the run cleanly.
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=30) == 128 + signal.SIGUSR1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


PROGRESS_RANK = """\
import os, sys, time
go = sys.argv[1]
i = 0
while not os.path.exists(go) and i < 1200:  # frames with no newline until the test says go
    sys.stdout.write(f"\\rstep {i:4d}/1200 [{'#' * (i % 20):<20}]")
    sys.stdout.flush()
    time.sleep(0.05)
    i += 1
sys.stdout.write("\\nprogress done\\n")
"""


def test_headless_prints_the_frames_of_an_unfinished_progress_line(tmp_path: Path) -> None:
    # A tqdm-like rank redraws one line with \r and never ends it: headless prints its
    # current frame now and then (a line each, stdout being a pipe), not only at the end.
    script = tmp_path / "progress.py"
    script.write_text(PROGRESS_RANK)
    go = tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "1",
         "--log-dir", str(tmp_path / "logs"), str(script), str(go)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    out = proc.stdout

    def read() -> None:
        for line in out:  # each line as it comes
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: len([ln for ln in lines if ln.startswith("[default0]:step")]) >= 2,
            timeout=60,
        )
        go.touch()  # only now may the rank end its line
        assert proc.wait(timeout=60) == 0
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    frames = [ln.rstrip("\n") for ln in lines if ln.startswith("[default0]:step")]
    assert len(set(frames)) >= 2  # different frames, each on a line of its own
    assert all("\r" not in f for f in frames)
    done = next(i for i, ln in enumerate(lines) if "progress done" in ln)
    assert lines.index(frames[0] + "\n") < done and lines.index(frames[1] + "\n") < done


FAILING_RANK = """\
import os, sys
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    print("OLD-ATTEMPT-0: gloo connection reset by peer", file=sys.stderr, flush=True)
elif sys.argv[1] == "speaks":
    print("NEW-ATTEMPT-1: the loader died", file=sys.stderr, flush=True)
sys.exit(3)
"""


@pytest.mark.parametrize("attempt_1", ["silent", "speaks"])
def test_headless_root_cause_without_record_quotes_that_attempts_last_stderr_lines(
    tmp_path: Path, attempt_1: str
) -> None:
    # No @record: torch's report only says how to enable tracebacks. The last stderr lines
    # are shown as in the UI, and only the failing attempt's own, never attempt 0's.
    script = tmp_path / "fails.py"
    script.write_text(FAILING_RANK)
    res = rankvisor(
        "run", "--headless", "--nproc-per-node", "1", "--max-restarts", "1",
        "--log-dir", str(tmp_path / "logs"), str(script), attempt_1,
    )
    assert res.returncode == 1, res.stderr
    # Attempt 0's line reached the console while it ran ...
    console, report = res.stderr.split("rankvisor: root cause:", 1)
    assert "OLD-ATTEMPT-0" in console
    # ... but the report of attempt 1's failure does not quote it.
    assert "OLD-ATTEMPT-0" not in report
    assert report.startswith(" rank 0 failed first (exit code 3)")
    (run_dir,) = (tmp_path / "logs").iterdir()
    stderr_log = run_dir / "attempt_1" / "0" / "stderr.log"
    if attempt_1 == "speaks":
        first = report.splitlines()[0]
        assert first.endswith("(exit code 3): NEW-ATTEMPT-1: the loader died")
        quoted = f"last stderr lines of rank 0 ({stderr_log}):\n  NEW-ATTEMPT-1: the loader died"
        assert quoted in report
    else:
        assert "To enable traceback" not in report.splitlines()[0]
        assert f"rank 0: no error.json, and stderr is empty ({stderr_log})" in report


def test_the_progress_regex_reaches_the_viewer(tmp_path: Path) -> None:
    """``--progress-regex`` (run and demo) goes into the config, the supervisor's RunInfo,
    over the wire, and into the viewer's progress reader."""
    from rankvisor.engine.control.wire import run_info_from_wire, run_info_to_wire
    from rankvisor.engine.supervisor import Supervisor
    from rankvisor.tui.cli.run_args import (
        build_demo_parser,
        build_run_parser,
        config_from_args,
        demo_config,
    )
    from rankvisor.tui.model import RunView

    regex = r"batch (?P<step>\d+) of (?P<total>\d+)"
    args = build_run_parser().parse_args(["--progress-regex", regex, SV_RANK])
    config = config_from_args(args)
    assert config.progress_regex == regex
    demo = build_demo_parser().parse_args(["--log-dir", str(tmp_path), "--progress-regex", regex])
    assert demo_config(demo).progress_regex == regex
    assert config_from_args(build_run_parser().parse_args([SV_RANK])).progress_regex is None
    info = Supervisor(config).snapshot()
    assert info.progress_regex == regex
    viewer = RunView(run_info_from_wire(run_info_to_wire(info)))
    found = viewer.progress_reader.read("batch 7 of 90 step 3")
    assert found is not None and (found.kind, found.step, found.total) == ("custom", 7, 90)
