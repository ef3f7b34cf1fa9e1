"""engine.redirects: file-descriptor-level redirects of stdout and stderr."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rankvisor.engine import redirects
from rankvisor.engine.redirects import redirect, redirect_stderr, redirect_stdout

pytestmark = pytest.mark.processes

_SCRIPT = textwrap.dedent(
    """
    import ctypes, ctypes.util, os, sys
    from rankvisor.engine.redirects import redirect_stdout, redirect_stderr

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    print("before", flush=True)
    libc.printf(b"c before\\n")  # left in C's buffer: must not leak into the file
    with redirect_stdout(sys.argv[1]), redirect_stderr(sys.argv[2]):
        print("python out")
        print("python err", file=sys.stderr)
        libc.printf(b"c out\\n")  # buffered in C; flushed into the file on exit
        os.system("echo system out; echo system err 1>&2")
    print("after")
    libc.printf(b"c after\\n")
    """
)


def test_python_c_and_child_output_land_in_the_files(tmp_path: Path) -> None:
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    # A fresh interpreter, so fd 1 and 2 are plain pipes and not pytest's capture.
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(out), str(err)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.read_text().splitlines() == ["python out", "c out", "system out"]
    assert err.read_text().splitlines() == ["python err", "system err"]
    # Everything outside the block stayed on the original stream, in order.
    assert proc.stdout.splitlines() == ["before", "c before", "after", "c after"]
    assert proc.stderr == ""


def test_redirect_in_process_restores_the_descriptors(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Under pytest's fd capture sys.stdout writes to a descriptor other than 1: both must
    # point at the file inside the block and come back afterwards.
    target = tmp_path / "out.log"
    before = os.fstat(1).st_ino
    print("outside before")
    with redirect_stdout(str(target)):
        print("inside")
        os.system("echo inside child")
    print("outside after")
    assert os.fstat(1).st_ino == before
    assert target.read_text().splitlines() == ["inside", "inside child"]
    assert capfd.readouterr().out.splitlines() == ["outside before", "outside after"]


def test_file_is_truncated_like_torch(tmp_path: Path) -> None:
    target = tmp_path / "err.log"
    target.write_text("old content that must go\n")
    with redirect_stderr(str(target)):
        os.write(2, b"new\n")
    assert target.read_text() == "new\n"


def test_unknown_stream_raises_value_error_with_torchs_message(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown standard stream <stdin>, must be one of"):
        with redirect("stdin", str(tmp_path / "x")):
            pass
    assert not (tmp_path / "x").exists()  # nothing touched before the check


def test_missing_directory_raises_before_switching(tmp_path: Path) -> None:
    before = os.fstat(1).st_ino
    with pytest.raises(FileNotFoundError):
        with redirect_stdout(str(tmp_path / "no" / "such" / "dir.log")):
            pass
    assert os.fstat(1).st_ino == before


def test_libc_found_without_libc_so_6(monkeypatch: pytest.MonkeyPatch) -> None:
    # musl has no libc.so.6 and find_library may return None there: we fall back to the
    # symbols already loaded into the process instead of failing (torch fails at import).
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    redirects.get_libc.cache_clear()
    try:
        libc = redirects.get_libc()
        assert libc is not None and libc.fflush(None) == 0
    finally:
        redirects.get_libc.cache_clear()


def test_redirect_works_without_any_libc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_library(name: object) -> ctypes.CDLL:
        raise OSError("no C library here")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    redirects.get_libc.cache_clear()
    try:
        assert redirects.get_libc() is None
        target = tmp_path / "out.log"
        with redirect_stdout(str(target)):
            print("still redirected")
        assert target.read_text() == "still redirected\n"
    finally:
        redirects.get_libc.cache_clear()


def test_import_does_not_load_libc_eagerly() -> None:
    # torch loads "libc.so.6" at import, which fails on musl; ours looks it up on first use.
    code = "import rankvisor.engine.redirects as r; print(r.get_libc.cache_info().currsize)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "0"
