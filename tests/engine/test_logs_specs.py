"""DefaultLogsSpecs: torch's tree, env mutation and errors; our three fixes (engine/README.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rankvisor.engine.logs_specs import DefaultLogsSpecs, LogsDest
from rankvisor.engine.std import Std


def _envs(n: int, **extra: str) -> dict[int, dict[str, str]]:
    return {r: dict(extra) for r in range(n)}


def test_tree_names_and_error_file_env(tmp_path: Path) -> None:
    specs = DefaultLogsSpecs(log_dir=str(tmp_path), redirects=Std.ALL)
    envs = _envs(2, TORCHELASTIC_RUN_ID="job7", TORCHELASTIC_RESTART_COUNT="3")
    dest = specs.reify(envs)

    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("job7_") and len(run_dir.name) == len("job7_") + 8
    attempt = run_dir / "attempt_3"
    assert sorted(p.name for p in attempt.iterdir()) == ["0", "1"]
    assert dest.stdouts == {r: str(attempt / str(r) / "stdout.log") for r in range(2)}
    assert dest.stderrs == {r: str(attempt / str(r) / "stderr.log") for r in range(2)}
    assert dest.error_files == {r: str(attempt / str(r) / "error.json") for r in range(2)}
    assert dest.filtered_stdout == str(attempt / "filtered_stdout.log")
    assert dest.filtered_stderr == str(attempt / "filtered_stderr.log")
    assert dest.tee_stdouts == {} and dest.tee_stderrs == {}
    # The caller's envs are updated in place, as torch does.
    assert envs[1]["TORCHELASTIC_ERROR_FILE"] == dest.error_files[1]
    assert specs.root_log_dir == str(tmp_path)


def test_defaults_run_id_and_attempt(tmp_path: Path) -> None:
    DefaultLogsSpecs(log_dir=str(tmp_path)).reify(_envs(1))
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("test_run_id_")
    assert [p.name for p in run_dir.iterdir()] == ["attempt_0"]


def test_tee_implies_redirect_and_console_is_empty_string(tmp_path: Path) -> None:
    dest = DefaultLogsSpecs(
        log_dir=str(tmp_path), redirects={0: Std.OUT}, tee={1: Std.ERR}
    ).reify(_envs(3))
    assert dest.stdouts[0].endswith("0/stdout.log") and dest.stderrs[0] == ""
    assert dest.stdouts[1] == "" and dest.stderrs[1].endswith("1/stderr.log")
    assert dest.tee_stderrs == {1: dest.stderrs[1]} and dest.tee_stdouts == {}
    assert dest.stdouts[2] == dest.stderrs[2] == ""


def test_local_ranks_filter_keeps_filtered_output_in_files_not_devnull(tmp_path: Path) -> None:
    """torch sends rank 1's and 2's console streams to /dev/null; we keep them on disk."""
    dest = DefaultLogsSpecs(
        log_dir=str(tmp_path), redirects={0: Std.OUT}, tee={1: Std.ERR}, local_ranks_filter={0}
    ).reify(_envs(3))
    assert os.devnull not in dest.stdouts.values()
    assert os.devnull not in dest.stderrs.values()
    assert dest.stdouts[1].endswith("1/stdout.log")  # torch: /dev/null
    assert dest.stderrs[2].endswith("2/stderr.log")  # torch: /dev/null
    assert dest.stderrs[0] == ""  # rank 0 passes the filter: still on the console
    assert dest.tee_stdouts == {} and dest.tee_stderrs == {}  # off the console


def test_log_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        DefaultLogsSpecs(log_dir=str(f))


def test_missing_log_dir_is_made_and_none_makes_a_temp_dir(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    DefaultLogsSpecs(log_dir=str(target))
    assert target.is_dir()
    specs = DefaultLogsSpecs()
    try:
        assert os.path.basename(specs.root_log_dir).startswith("torchelastic_")
        assert os.path.isdir(specs.root_log_dir)
    finally:
        os.rmdir(specs.root_log_dir)


def test_devnull_mode(tmp_path: Path) -> None:
    envs = _envs(2)
    dest = DefaultLogsSpecs(log_dir=os.devnull, redirects=Std.ALL).reify(envs)
    assert dest.stdouts == {0: "", 1: ""}  # torch: console
    assert dest.error_files == {0: os.devnull, 1: os.devnull}
    assert envs[0]["TORCHELASTIC_ERROR_FILE"] == ""
    # torch gives "/dev/null/filtered_stdout.log", which cannot be opened.
    assert dest.filtered_stdout == dest.filtered_stderr == os.devnull


def test_reify_again_keeps_earlier_logs_of_the_same_attempt(tmp_path: Path) -> None:
    """torch rmtree's attempt_0 on a second reify; we move it aside."""
    specs = DefaultLogsSpecs(log_dir=str(tmp_path), redirects=Std.OUT)
    first = specs.reify(_envs(1))
    Path(first.stdouts[0]).write_text("precious\n")
    second = specs.reify(_envs(1))
    assert second.stdouts[0] == first.stdouts[0]
    assert not os.path.exists(second.stdouts[0])  # fresh attempt dir
    run_dir = Path(specs.run_log_dir or "")
    assert (run_dir / "attempt_0.old1" / "0" / "stdout.log").read_text() == "precious\n"
    # A third time does not overwrite the kept copy.
    Path(second.stdouts[0]).write_text("second\n")
    specs.reify(_envs(1))
    assert (run_dir / "attempt_0.old2" / "0" / "stdout.log").read_text() == "second\n"


def test_new_attempt_uses_the_same_run_dir(tmp_path: Path) -> None:
    specs = DefaultLogsSpecs(log_dir=str(tmp_path))
    specs.reify(_envs(1))
    specs.reify(_envs(1, TORCHELASTIC_RESTART_COUNT="1"))
    (run_dir,) = tmp_path.iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["attempt_0", "attempt_1"]


def test_repr_and_eq(tmp_path: Path) -> None:
    a = DefaultLogsSpecs(log_dir=str(tmp_path), redirects=Std.OUT, local_ranks_filter={1})
    b = DefaultLogsSpecs(log_dir=str(tmp_path), redirects=Std.OUT, local_ranks_filter={1})
    assert a == b and a != DefaultLogsSpecs(log_dir=str(tmp_path))
    assert repr(a) == (
        f"DefaultLogsSpecs(root_log_dir={tmp_path}, redirects={Std.OUT}, tee={Std.NONE},"
        " local_ranks_filter={1})"
    )


def test_logs_dest_defaults_are_not_shared() -> None:
    a, b = LogsDest(), LogsDest()
    a.stdouts[0] = "x"
    assert b.stdouts == {}
