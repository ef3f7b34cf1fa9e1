"""Every flag torchrun reads from a ``PET_`` variable, parsed by torch's parser and by ours.

The list is torch's, read from its parser when the test runs (the actions of
``get_args_parser()`` built from argparse_util's ``env`` and ``check_env``), never copied. For
each flag x {given as a flag, given as its PET_ variable, both (the flag wins), neither}, the
same argv and environment go through both parsers and the resolved values must agree; so
must the failures (a bad value is status 2 in both). Pure parsing: no process starts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from rankvisor.engine.supervisor.run_config import ConfigError
from rankvisor.tui.cli.run_args import build_run_parser, config_from_args, parse_run_args

from tests.conftest import TORCH_IMPORT

pytestmark = TORCH_IMPORT

TORCH_ENV_FLAGS = 28
"""How many env-backed flags torch 2.13's torchrun has."""

KNOWN_DIFFERENCES = {
    ("rdzv_id", "default"): "one node: a fresh uuid per run (torchrun's 'none' with --nnodes)",
}
"""(torch's dest, case) -> why our resolved value differs on purpose."""

REFUSED = {
    "run_path": ("--run-path", "ranks run as separate processes, never in rankvisor's own"),
    "logs_specs": ("--logs-specs", "x", "rankvisor keeps torch's default log layout"),
    "event_log_handler": ("--event-log-handler", "console",
                          "rankvisor sends none of torch's elastic events"),
}
"""torch's dest -> the argv that asks for it, and why it is refused (parsed, then refused)."""

SAMPLES = {"nnodes": ("2:4", "3"), "nproc_per_node": ("3", "2"), "master_addr": ("10.0.0.7",
           "10.0.0.8"), "signals_to_handle": ("SIGUSR1", "SIGTERM"), "redirects": ("3", "0:1"),
           "tee": ("0:2", "1"), "local_ranks_filter": ("0,2", "1"),
           "rdzv_conf": ("join_timeout=5", "timeout=9")}
"""Realistic values where a generic one reads oddly; (for the flag, for the variable)."""

_CLEARED = ("PET_", "SLURM_", "SKYPILOT_", "TORCHELASTIC_", "RANKVISOR_")


@pytest.fixture(scope="module")
def torch_run() -> Any:
    import torch.distributed.run as run

    return run


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


@contextlib.contextmanager
def _environ(extra: dict[str, str]) -> Iterator[None]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED)}
    with mock.patch.dict(os.environ, {**clean, **extra}, clear=True):
        yield


def _torch_parse(run: Any, argv: list[str], env: dict[str, str]) -> argparse.Namespace | str:
    with _environ(env), contextlib.redirect_stderr(io.StringIO()):
        try:
            return run.get_args_parser().parse_args(argv)  # type: ignore[no-any-return]
        except SystemExit as e:
            return f"exit {e.code}"
        except ValueError:  # a switch's PET_ variable that is no integer: torch raises
            return "exit 2"


def _our_parse(argv: list[str], env: dict[str, str]) -> argparse.Namespace | str:
    with _environ(env), contextlib.redirect_stderr(io.StringIO()):
        try:
            return parse_run_args(argv)[0]
        except SystemExit as e:
            return f"exit {e.code}"


def _env_actions(run: Any) -> list[argparse.Action]:
    from torch.distributed import argparse_util

    with _environ({}):
        parser = run.get_args_parser()
    kinds = (argparse_util.env, argparse_util.check_env)
    return [a for a in parser._actions if isinstance(a, kinds)]


def _sample(action: argparse.Action, which: int) -> str:
    if action.dest in SAMPLES:
        return SAMPLES[action.dest][which]
    if action.choices:
        return list(action.choices)[-1 - which]
    if action.type is int:
        return ("7", "5")[which]
    if action.type is float:
        return ("0.5", "2.25")[which]
    return ("a,,b,c", "d,e")[which] if "filters" in action.dest else ("flagval", "envval")[which]


def _cases(action: argparse.Action, script: str) -> Iterator[tuple[str, list[str],
                                                                      dict[str, str]]]:
    opt, var = action.option_strings[-1], f"PET_{action.dest.upper()}"
    switch = action.nargs == 0
    given = [opt] if switch else [opt, _sample(action, 0)]
    yield "flag", [*given, script], {}
    yield "pet", [script], {var: "1" if switch else _sample(action, 1)}
    yield "both", [*given, script], {var: "0" if switch else _sample(action, 1)}
    yield "default", [script], {}


def _ours_dest(opt: str) -> str:
    parser = build_run_parser()
    return parser._option_string_actions[opt].dest  # type: ignore[attr-defined]


def test_every_env_backed_flag_resolves_as_torchrun(torch_run: Any, script: str) -> None:
    actions = _env_actions(torch_run)
    assert len(actions) == TORCH_ENV_FLAGS, [a.dest for a in actions]
    mismatches, compared = [], 0
    for action in actions:
        ours_dest = _ours_dest(action.option_strings[-1])
        for case, argv, env in _cases(action, script):
            theirs, ours = _torch_parse(torch_run, argv, env), _our_parse(argv, env)
            if isinstance(theirs, str) or isinstance(ours, str):
                mismatches.append((action.dest, case, theirs, ours))
                continue
            t, o = getattr(theirs, action.dest), getattr(ours, ours_dest)
            compared += 1
            if (action.dest, case) in KNOWN_DIFFERENCES:
                assert t != o, f"{action.dest} {case}: agrees now; drop it from the list"
            elif t != o:
                mismatches.append((action.dest, case, t, o))
    assert not mismatches
    assert compared == TORCH_ENV_FLAGS * 4


def _bad_values(action: argparse.Action) -> list[str]:
    if action.nargs == 0:
        return ["yes"]  # PET_ only: a switch given as a flag takes no value
    if action.type in (int, float):
        return ["abc", "1e", ""]
    return ["bogus"] if action.choices else []


def test_bad_values_fail_as_in_torchrun(torch_run: Any, script: str) -> None:
    """A value torchrun refuses is refused, with status 2 (a switch's bad PET_ variable is a
    traceback in torch; one line in ours). A value it takes from PET_ is taken (argparse does
    not check a default against the choices: PET_START_METHOD=bogus passes in both)."""
    rows = []
    for action in _env_actions(torch_run):
        var = f"PET_{action.dest.upper()}"
        for bad in _bad_values(action):
            if action.nargs != 0:
                argv = [action.option_strings[-1], bad, script]
                rows.append((action.dest, "flag", _torch_parse(torch_run, argv, {}),
                             _our_parse(argv, {})))
            pet_t, pet_o = (_torch_parse(torch_run, [script], {var: bad}),
                            _our_parse([script], {var: bad}))
            rows.append((action.dest, "pet",
                         pet_t if isinstance(pet_t, str) else getattr(pet_t, action.dest),
                         pet_o if isinstance(pet_o, str) else "parsed"))
    assert ("start_method", "flag", "exit 2", "exit 2") in rows
    for dest, case, theirs, ours in rows:
        if theirs == "exit 2":
            assert ours == "exit 2", (dest, case)
        else:
            assert ours == "parsed", (dest, case, theirs, ours)


def test_start_method_bogus_exits_2_in_one_line(script: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with _environ({}), pytest.raises(SystemExit) as e:
        parse_run_args(["--start-method", "bogus", script])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'bogus'" in err


def test_a_bad_pet_variable_is_named_in_one_line(script: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with _environ({"PET_MAX_RESTARTS": "two"}), pytest.raises(SystemExit) as e:
        parse_run_args([script])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PET_MAX_RESTARTS='two'" in err
    with _environ({"PET_MAX_RESTARTS": "two"}):
        assert parse_run_args(["--max-restarts", "1", script])[0].max_restarts == 1


@pytest.mark.parametrize("dest", sorted(REFUSED))
def test_refusals_are_one_line(dest: str, script: str) -> None:
    *argv, why = REFUSED[dest]
    with _environ({}):
        args, _ = parse_run_args([*argv, script])
        with pytest.raises(ConfigError) as e:
            config_from_args(args)
    assert argv[0] in str(e.value) and "\n" not in str(e.value), why
