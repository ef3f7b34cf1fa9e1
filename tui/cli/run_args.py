"""From a command line to a ``SupervisorConfig``: ``run``'s torchrun flags and ``demo``'s.

Shared by the CLI and by ``rankvisor serve``'s browser sessions, so both build a run the same
way. Everything that can be checked is checked here, before a process starts: a bad value
raises ``ConfigError`` (or exits 2 with one line, for argparse's own errors).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Final

from ...engine.forensics.progress import check_regex
from ...engine.handle import DEFAULT_TERM_TIMEOUT_S
from ...engine.names.signals import check_stop_signal, parse_signal
from ...engine.std import Std
from ...engine.supervisor.cluster_options import ClusterOptions, parse_nnodes, parse_rdzv_conf
from ...engine.supervisor.run_config import (
    STDIN_MODES,
    ConfigError,
    SupervisorConfig,
    check_rank_count,
    parse_local_ranks_filter,
)
from .debug_flags import add_debug_flags, debug_options, ranks_optional
from .pet_env import PetParser, PetSwitch, PetValue
from .scheduler_flags import NO_SCHEDULER_ENV, apply_scheduler_env, unset_defaults

__all__ = [
    "Job",
    "build_demo_parser",
    "build_run_parser",
    "config_from_args",
    "demo_config",
    "parse_job",
    "parse_run_args",
]

PROG = "rankvisor"
DEMO_NPROCS = 4
DEFAULT_DEMO_STDERR_FILTERS = ("WARNING",)
SHELL_JOIN_TIMEOUT_S = 60
"""The rendezvous's join timeout when a scheduler's variables, not a person, asked for more
nodes from a terminal or outside a job step (unless ``--rdzv-conf join_timeout=`` says)."""
DEMO_TERM_TIMEOUT = 10.0
"""The demo's SIGTERM -> SIGKILL timeout unless --term-timeout (or the env) says otherwise."""


@dataclass(frozen=True)
class Job:
    """A run as the command line asks for it: the config and how to run it."""

    config: SupervisorConfig
    headless: bool = False
    foreground: bool = False
    """The supervisor inside the TUI's process (the run ends with the viewer)."""
    detach: bool = False
    """Start the supervisor process and return without a viewer."""
    on_failure: str | None = None


_Parser = PetParser
"""argparse, but an error is one line and status 2 (no usage dump to scroll past)."""


def _add_logging_flags(p: argparse.ArgumentParser, *,
                       term_timeout_default: float = DEFAULT_TERM_TIMEOUT_S) -> None:
    p.add_argument("--log-dir", "--log_dir", dest="log_dir", action=PetValue, default=None,
                   help="base directory of the run's logs (default: a new temp dir)")
    p.add_argument("-r", "--redirects", action=PetValue, default="0",
                   help="streams kept off the console, torchrun syntax: 0-3 or '0:3,1:0'")
    p.add_argument("-t", "--tee", action=PetValue, default="0",
                   help="redirected streams still shown on the console (same syntax)")
    p.add_argument("--term-timeout", type=float, default=None, metavar="SECONDS",
                   help=f"seconds from SIGTERM to SIGKILL (default {term_timeout_default:g}, "
                        "or TORCH_ELASTIC_SHUTDOWN_TIMEOUT)")
    p.set_defaults(term_timeout_default=float(term_timeout_default))
    # torchrun's name: whole seconds, as torch's parser takes them (--term-timeout wins).
    p.add_argument("--shutdown-timeout", "--shutdown_timeout", dest="shutdown_timeout",
                   action=PetValue, type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-stack-on-kill", dest="stack_on_kill", action="store_false",
                   help="do not dump the Python stacks of ranks about to be SIGKILLed "
                        "(py-spy, into the run dir's stacks/)")
    p.add_argument("--collectives", dest="collectives", action="store_true", default=True,
                   help="Python ranks serve torch's worker server with its Flight Recorder "
                        "on, read by the suspect and 'rankvisor collectives' (the default)")
    p.add_argument("--no-collectives", dest="collectives", action="store_false",
                   help="run the Python ranks as given: no worker server, no Flight Recorder")
    p.add_argument("--headless", action="store_true",
                   help="no TUI: print the ranks' output with prefixes, like torchrun --tee 3")
    p.add_argument("--foreground", action="store_true",
                   help="the TUI with the supervisor inside it: quitting it (or losing the "
                        "terminal) ends the run, as before detachable runs")
    p.add_argument("-D", "--detach", action="store_true",
                   help="start the run's supervisor and return at once; attach later")
    p.add_argument("--stdin", choices=STDIN_MODES, default=None,
                   help="the ranks' stdin: pipe (held by the supervisor: answer prompts and "
                        "pdb with `rankvisor input`/`debug` or the TUI; the default), inherit "
                        "(this terminal, as torchrun; the default of --headless) or null "
                        "(/dev/null)")
    p.add_argument("--on-failure", metavar="CMD", default=None,
                   help="shell command run once if the run fails (RANKVISOR_RUN_DIR and "
                        "the root cause in its environment)")
    p.add_argument("--suspect-silence-factor", type=float, metavar="K",
                   default=_float_env("RANKVISOR_SUSPECT_SILENCE_FACTOR", 3.0),
                   help="a rank silent K times its peers' median gap between lines before "
                        "the first failure is a suspect (default 3, or "
                        "RANKVISOR_SUSPECT_SILENCE_FACTOR)")
    p.add_argument("--suspect-silence-min", type=float, metavar="SECONDS",
                   default=_float_env("RANKVISOR_SUSPECT_SILENCE_MIN", 2.0),
                   help="... and silent at least this long (default 2, or "
                        "RANKVISOR_SUSPECT_SILENCE_MIN)")
    p.add_argument("--progress-regex", type=_progress_regex, metavar="REGEX", default=None,
                   help="how a line says its step, e.g. 'it=(\\d+)': the group named step, "
                        "else the first group, else the whole match (a group named total "
                        "gives the end); tried before step N, iter N, epoch N and tqdm's N/M")


def _progress_regex(text: str) -> str:
    """argparse type of ``--progress-regex``: checked now, in one line, before any rank runs."""
    try:
        check_regex(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _float_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{name}={text[:30]!r}: not a number") from None


def build_run_parser(prog: str = f"{PROG} run") -> argparse.ArgumentParser:
    """The ``run`` parser: torchrun's flags plus rankvisor's own."""
    p = _Parser(prog=prog, description="Run N local ranks of a script under supervision.")
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node",
                   action=PetValue, default="1",
                   help="ranks on this node: a number, 'cpu', 'gpu', 'xpu' or 'auto'")
    p.add_argument("--allow-many-ranks", action="store_true",
                   help="allow more than 1024 ranks on this node (more is usually a typo)")
    p.add_argument("--nnodes", action=PetValue, default="1:1",
                   help="nodes: N or MIN:MAX; more than 1 runs torch's agent and rendezvous "
                        "(--rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id ID)")
    p.add_argument("--node-rank", "--node_rank", dest="node_rank", action=PetValue, type=int,
                   default=0)
    p.add_argument("--standalone", action=PetSwitch, help="accepted; one node anyway")
    p.add_argument("--no-scheduler-env", action="store_true",
                   help="do not fill --nnodes, --rdzv-* and --nproc-per-node from Slurm's or "
                        "SkyPilot's environment (or set RANKVISOR_NO_SCHEDULER_ENV=1)")
    p.add_argument("--rdzv-backend", "--rdzv_backend", dest="rdzv_backend", action=PetValue,
                   default="static")
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", action=PetValue,
                   default="")
    p.add_argument("--rdzv-conf", "--rdzv_conf", dest="rdzv_conf", action=PetValue, default="")
    p.add_argument("--run-id", "--rdzv-id", "--rdzv_id", dest="run_id", action=PetValue,
                   pet="rdzv_id", default=None,
                   help="TORCHELASTIC_RUN_ID and the log directory prefix (default: a uuid on one "
                        "node, torchrun's 'none' with --nnodes: the same on every node)")
    p.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", action=PetValue,
                   type=int, default=0, help="restart the whole group up to K times on a failure")
    p.add_argument("--monitor-interval", "--monitor_interval", dest="monitor_interval",
                   action=PetValue, type=float, default=0.1,
                   help="accepted for torchrun compatibility; exits are seen at once")
    p.add_argument("--start-method", "--start_method", dest="start_method", action=PetValue,
                   default="spawn", choices=["spawn", "fork", "forkserver"],
                   help="checked as torchrun checks it; scripts run as programs either way")
    p.add_argument("--event-log-handler", "--event_log_handler", dest="event_log_handler",
                   action=PetValue, default="null",
                   help="only 'null': rankvisor does not send torch's elastic events "
                        "(its own are in the run dir)")
    p.add_argument("--role", action=PetValue, default="default",
                   help="role name (ROLE_NAME, log prefixes)")
    p.add_argument("-m", "--module", action=PetSwitch,
                   help="run the script as a module (python -m)")
    p.add_argument("--no-python", "--no_python", dest="no_python", action=PetSwitch,
                   help="run the script as a program, not with python")
    p.add_argument("--run-path", "--run_path", dest="run_path", action=PetSwitch,
                   help=argparse.SUPPRESS)
    _add_logging_flags(p)
    p.add_argument("--local-ranks-filter", "--local_ranks_filter", dest="local_ranks_filter",
                   action=PetValue, default="",
                   help="only these ranks reach the console, e.g. '0,2'")
    p.add_argument("--duplicate-stdout-filters", "--duplicate_stdout_filters",
                   dest="dup_stdout", action=PetValue, pet="duplicate_stdout_filters",
                   type=_comma_list, default=[], help=argparse.SUPPRESS)
    p.add_argument("--duplicate-stderr-filters", "--duplicate_stderr_filters",
                   dest="dup_stderr", action=PetValue, pet="duplicate_stderr_filters",
                   type=_comma_list, default=[], help=argparse.SUPPRESS)
    p.add_argument("--filter-stdout", action="append", default=[], metavar="STR",
                   help="copy stdout lines containing STR to filtered_stdout.log (repeatable)")
    p.add_argument("--filter-stderr", action="append", default=[], metavar="STR",
                   help="copy stderr lines containing STR to filtered_stderr.log (repeatable)")
    p.add_argument("--master-addr", "--master_addr", dest="master_addr", action=PetValue,
                   default="127.0.0.1")
    p.add_argument("--master-port", "--master_port", dest="master_port", action=PetValue,
                   type=int, default=None, help="rank 0's c10d store port (default: a free port)")
    p.add_argument("--local-addr", "--local_addr", dest="local_addr", action=PetValue,
                   default=None, help=argparse.SUPPRESS)
    p.add_argument("--log-line-prefix-template", dest="log_line_prefix_template",
                   default=os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"),
                   help="e.g. '[${role_name}${rank}]:' (${local_rank} too)")
    p.add_argument("--numa-binding", "--numa_binding", dest="numa_binding", default=None,
                   choices=["node", "socket", "exclusive", "core-complex"],
                   help="pin each rank's CPUs to its NUMA node (as torchrun; no numactl)")
    p.add_argument("--signals-to-handle", "--signals_to_handle", dest="signals_to_handle",
                   action=PetValue, default="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
                   help="signals that stop the run (forwarded to the ranks, then SIGKILL)")
    p.add_argument("--logs-specs", "--logs_specs", dest="logs_specs", default=None,
                   help=argparse.SUPPRESS)
    p.add_argument("--virtual-local-rank", "--virtual_local_rank", dest="virtual_local_rank",
                   action=PetSwitch,
                   help="LOCAL_RANK 0 in every rank, CUDA_VISIBLE_DEVICES narrowed to its device")
    p.add_argument("--no-unbuffered", action="store_true",
                   help="do not run Python ranks unbuffered (-u, PYTHONUNBUFFERED)")
    p.add_argument("--no-faulthandler", action="store_true",
                   help="do not set PYTHONFAULTHANDLER=1")
    add_debug_flags(p)
    p.add_argument("training_script", metavar="script", help="the script (or program)")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER, metavar="args")
    return p


def build_demo_parser() -> argparse.ArgumentParser:
    """``demo``: the embedded 4-rank gloo job, through the same path as ``run``."""
    p = _Parser(prog=f"{PROG} demo", description="Run a 4-rank demo job (gloo, CPU).")
    # The demo's stalled rank ignores SIGTERM on purpose: with torchrun's 30 s every quit
    # would wait 30 s for its SIGKILL.
    _add_logging_flags(p, term_timeout_default=DEMO_TERM_TIMEOUT)
    return p


def _comma_list(text: str) -> list[str]:
    """torchrun's comma_separated_list: ",," stands for a literal comma; parts kept as given
    (an empty part too, which the filters then drop: an empty filter would copy every line)."""
    return [part.replace("\0", ",") for part in text.replace(",,", "\0").split(",")]


_COUNT = re.compile(r"[0-9]+")
"""ASCII digits only: ``str.isdigit`` also takes "²", which ``int`` refuses."""


def _nprocs(value: str, allow_many: bool) -> int:
    text = value.strip()
    if _COUNT.fullmatch(text):
        digits = text.lstrip("0") or "0"
        if len(digits) > 9:
            # Refused from its length: a number of that size is never built, nor anything
            # of its size (the slots, the environments).
            check_rank_count(10**9 + 1, allow_many=allow_many, given=text)
        n = int(digits)
    elif text in ("cpu", "auto"):
        # "auto" is the accelerator count when there is one (torch.accelerator: CUDA, XPU,
        # ...); only then is torch worth importing.
        n = _accelerator_count("auto") if text == "auto" else 0
        n = n or os.cpu_count() or 1
    elif text in ("gpu", "xpu"):
        n = _accelerator_count(text)
        if not n:
            raise ConfigError(f"--nproc-per-node {text}: no {text.upper()} is available")
    elif re.fullmatch(r"[+-]?[0-9]+", text):
        raise ConfigError(f"--nproc-per-node {value!r}: must be a whole number of at least 1")
    else:
        raise ConfigError(
            f"--nproc-per-node {value!r}: not a number (or one of cpu, gpu, xpu, auto)"
        )
    if n < 1:
        raise ConfigError(f"--nproc-per-node {value!r}: must be at least 1")
    check_rank_count(n, allow_many=allow_many)
    return n


def _accelerator_count(kind: str) -> int:
    """Devices of ``kind`` as torchrun counts them: "gpu" CUDA's, "xpu" XPU's, "auto"
    ``torch.accelerator``'s (whichever this torch has); 0 without torch or the device."""
    # torch warns at import when NumPy is missing ("Failed to initialize NumPy"), which a
    # fresh environment often is and which has nothing to do with counting GPUs.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torch
    except ImportError:
        return 0
    if kind == "auto" and hasattr(torch, "accelerator"):
        backend: Any = torch.accelerator
    else:
        backend = getattr(torch, "xpu" if kind == "xpu" else "cuda", None)
    if backend is None or not backend.is_available():
        return 0
    return int(backend.device_count())


def _std(flag: str, value: str) -> Std | dict[int, Std]:
    try:
        return Std.from_str(value)
    except ValueError:
        # Std.from_str words its error as torch does (with its regexes): say it for a person.
        bad = next((part for part in value.split(",") if not _STD_PART.fullmatch(part)), value)
        raise ConfigError(
            f"{flag}: {bad!r} is not valid: give 0-3 (0 none, 1 stdout, 2 stderr, 3 both) for "
            "every rank, or local_rank:value pairs such as 0:3,1:0"
        ) from None


_STD_PART: Final = re.compile(r"[0-3]|[0-9]+:[0-3]")


def _check_script(args: argparse.Namespace) -> None:
    script = args.training_script
    if args.no_python:
        if args.module:
            raise ConfigError("--no-python and -m cannot be used together")
        if os.sep not in script and shutil.which(script) is None:
            raise ConfigError(f"{script}: command not found")
        if os.sep in script and not os.path.isfile(script):
            raise ConfigError(f"{script}: no such file")
        return
    if args.module:
        # Only the top-level package is looked up, so nothing of the user's is imported.
        top = script.split(".")[0]
        sys.path.insert(0, os.getcwd())
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        finally:
            sys.path.pop(0)
        if not found:
            raise ConfigError(f"module {script!r}: no module named {top!r}")
        return
    if os.path.isdir(script):
        raise ConfigError(f"script {script!r} is a directory: give the Python file to run")
    if not os.path.isfile(script):
        raise ConfigError(f"script {script!r} does not exist")


def _signals(text: str) -> tuple[int, ...]:
    """``--signals-to-handle``: names or numbers ("SIGTERM,INT,SIGRTMIN+2"), each once."""
    out: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            sig = parse_signal(part)
        except ValueError as e:
            raise ConfigError(f"--signals-to-handle {text!r}: {e}") from None
        try:
            check_stop_signal(sig)
        except ValueError as e:
            raise ConfigError(f"--signals-to-handle: {e}") from None
        if sig not in out:  # twice would make the second handler "restore" to the first
            out.append(sig)
    return tuple(out)


def _filters(duplicate: list[str], given: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(part for part in [*duplicate, *given] if part))


def _term_timeout(args: argparse.Namespace) -> float:
    """``--term-timeout``, else ``--shutdown-timeout`` (or PET_SHUTDOWN_TIMEOUT), else the
    env, else the default (range checked by validate)."""
    if args.term_timeout is not None:
        return float(args.term_timeout)
    if getattr(args, "shutdown_timeout", None) is not None:
        return float(args.shutdown_timeout)
    default = getattr(args, "term_timeout_default", DEFAULT_TERM_TIMEOUT_S)
    text = os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    if text is None:
        return float(default)
    try:
        return float(text)
    except ValueError:
        raise ConfigError(
            f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={text[:30]!r}: not a number of seconds"
        ) from None


def config_from_args(args: argparse.Namespace) -> SupervisorConfig:
    """Turn parsed ``run`` flags into a validated SupervisorConfig.

    Raises:
        ConfigError: one line naming the bad flag or value.
    """
    if args.run_path:
        raise ConfigError("--run-path is not supported: scripts run as separate processes")
    if args.logs_specs:
        raise ConfigError("--logs-specs is not supported: rankvisor keeps torch's default layout")
    if args.event_log_handler != "null":
        raise ConfigError(
            f"--event-log-handler {args.event_log_handler!r} (or PET_EVENT_LOG_HANDLER) is not "
            "supported: rankvisor sends none of torch's elastic events (its own are in the run "
            "dir's status.json); drop it or give 'null'")
    cluster = _cluster_options(args)
    nprocs = _nprocs(args.nproc_per_node, args.allow_many_ranks)
    redirects = _std("--redirects", args.redirects)
    tee = _std("--tee", args.tee)
    ranks_filter = parse_local_ranks_filter(args.local_ranks_filter)
    _check_script(args)
    if args.no_python:
        entrypoint, cmd_args = args.training_script, []
        if os.sep not in entrypoint:
            entrypoint = shutil.which(entrypoint) or entrypoint
    else:
        # torchrun's command line: python -u [-m] script args.
        entrypoint = os.environ.get("PYTHON_EXEC", sys.executable)
        cmd_args = [] if args.no_unbuffered else ["-u"]
        if args.module:
            cmd_args.append("-m")
        cmd_args.append(args.training_script)
    cmd_args.extend(args.training_script_args)
    config = SupervisorConfig(
        entrypoint=entrypoint,
        args=tuple(cmd_args),
        nprocs=nprocs,
        role=args.role,
        run_id=args.run_id,
        log_dir=args.log_dir,
        redirects=redirects,
        tee=tee,
        local_ranks_filter=ranks_filter,
        stdout_filters=_filters(args.dup_stdout, args.filter_stdout),
        stderr_filters=_filters(args.dup_stderr, args.filter_stderr),
        log_line_prefix_template=args.log_line_prefix_template,
        term_timeout=_term_timeout(args),
        max_restarts=args.max_restarts,
        master_addr=args.master_addr,
        master_port=args.master_port,
        unbuffered=not args.no_unbuffered,
        faulthandler=not args.no_faulthandler,
        numa_binding=args.numa_binding,
        signals_to_handle=_signals(args.signals_to_handle),
        allow_many_ranks=args.allow_many_ranks,
        suspect_silence_factor=args.suspect_silence_factor,
        suspect_silence_min_s=args.suspect_silence_min,
        stack_on_kill=args.stack_on_kill,
        cluster=cluster,
        progress_regex=args.progress_regex,
        debug=debug_options(args, nprocs),
        collectives=args.collectives,
        # torchrun's launcher puts it in its own environment, so every rank inherits it.
        env={"TORCHELASTIC_SIGNALS_TO_HANDLE": args.signals_to_handle},
        virtual_local_rank=args.virtual_local_rank,
    )
    config.validate()
    return config


def _cluster_options(args: argparse.Namespace) -> ClusterOptions | None:
    """``--nnodes`` other than 1: torchrun's multi-node flags, read as torchrun reads them.

    The run id must be the same on every node: torchrun's default ("none") unless given.
    c10d ignores ``--node-rank`` (the rendezvous assigns the group rank), as torchrun says.
    """
    try:
        low, high = parse_nnodes(args.nnodes)
        conf = parse_rdzv_conf(args.rdzv_conf)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if high == 1:
        if args.node_rank != 0:
            raise ConfigError(f"--node-rank {args.node_rank}: one node has node rank 0")
        return None  # one node: rankvisor's own single-node path
    if args.run_id is None:
        args.run_id = "none"  # torchrun's default: every node must name the same run
    if args.node_rank != 0 and args.rdzv_backend != "static":
        print(f"{PROG}: warning: --node-rank is only used by the static rendezvous backend;"
              f" it is ignored for --rdzv-backend {args.rdzv_backend}", file=sys.stderr)
    if args.rdzv_backend == "static" and args.node_rank >= high:
        raise ConfigError(f"--node-rank {args.node_rank}: must be below --nnodes {high}")
    if args.rdzv_backend != "static" and not args.rdzv_endpoint:
        raise ConfigError(f"--rdzv-backend {args.rdzv_backend} needs --rdzv-endpoint HOST:PORT")
    hint = ""
    found = getattr(args, "scheduler_nodes", None)
    if found is not None:
        hint = (f"--nnodes {args.nnodes} came from {found.source}'s variables; for a run on "
                f"this machine only: --no-scheduler-env or {NO_SCHEDULER_ENV}=1")
        if (not found.in_step or sys.stdin.isatty()) and "join_timeout" not in conf:
            # A shell that kept a job's variables (salloc, a step's env in tmux): a person
            # waits at a terminal for nodes that may never come, so not torch's 600 s.
            conf["join_timeout"] = str(SHELL_JOIN_TIMEOUT_S)
    return ClusterOptions(
        min_nodes=low, max_nodes=high, rdzv_backend=args.rdzv_backend,
        rdzv_endpoint=args.rdzv_endpoint, rdzv_conf=conf, node_rank=args.node_rank,
        local_addr=args.local_addr, monitor_interval=args.monitor_interval, wait_hint=hint,
    )


def _demo_constant(path: str, name: str, default: Any) -> Any:
    """A literal constant of the demo module, read without importing it (torch)."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return default
    for node in tree.body:
        target: ast.expr
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == name and value is not None:
            try:
                return ast.literal_eval(value)
            except ValueError:
                break
    return default


def demo_config(args: argparse.Namespace) -> SupervisorConfig:
    """The demo job as a run: ``tui/cli/demo_job.py`` on 4 ranks, logging flags from ``args``."""
    spec = importlib.util.find_spec("rankvisor.tui.cli.demo_job")
    if spec is None or not spec.origin:
        raise ConfigError("the demo job (tui/cli/demo_job.py) is not installed")
    path = spec.origin
    config = SupervisorConfig(
        entrypoint=sys.executable,
        args=("-u", path),
        nprocs=int(_demo_constant(path, "DEMO_NPROCS", DEMO_NPROCS)),
        role="demo",
        log_dir=args.log_dir,
        redirects=_std("--redirects", args.redirects),
        tee=_std("--tee", args.tee),
        stdout_filters=tuple(_demo_constant(path, "DEMO_STDOUT_FILTERS", ())),
        stderr_filters=tuple(
            _demo_constant(path, "DEMO_STDERR_FILTERS", DEFAULT_DEMO_STDERR_FILTERS)
        ),
        term_timeout=_term_timeout(args),
        suspect_silence_factor=args.suspect_silence_factor,
        suspect_silence_min_s=args.suspect_silence_min,
        stack_on_kill=getattr(args, "stack_on_kill", True),
        progress_regex=args.progress_regex,
        collectives=getattr(args, "collectives", True),
    )
    config.validate()
    return config


def _stdin_mode(args: argparse.Namespace) -> str:
    """``--stdin``, or its default: the terminal's for a headless run (torchrun's way, and a
    pipeline feeds the ranks), a pipe the supervisor holds otherwise."""
    headless = args.headless or (not args.detach and not sys.stdout.isatty())
    if args.stdin is None:
        return "inherit" if headless else "pipe"
    if args.stdin == "inherit" and not headless:
        raise ConfigError(
            "--stdin inherit: the TUI reads this terminal and a detached supervisor has "
            "none; use --headless, or --stdin pipe and `rankvisor input`/`rankvisor debug`"
        )
    return str(args.stdin)


def parse_run_args(argv: list[str]) -> tuple[argparse.Namespace, str | None]:
    """``run``'s flags resolved as torchrun resolves them (the flag, else its ``PET_``
    variable, else the scheduler's value, else the default), and the line saying what the
    scheduler filled. Parsing only: nothing is checked beyond what argparse checks.

    Raises:
        ConfigError: the scheduler's environment cannot be one job.
    """
    parser = build_run_parser()
    defaults = unset_defaults(parser)
    args = parser.parse_args(ranks_optional(parser, argv))
    return args, apply_scheduler_env(args, defaults)


def parse_job(command: str, argv: list[str]) -> Job:
    """The run that ``rankvisor <command> <argv>`` asks for, and how to run it.

    Args:
        command: "run" or "demo".
        argv: the arguments after the command.

    Raises:
        ConfigError: a value that cannot work (the message is one line for a person).
    """
    if command == "demo":
        args = build_demo_parser().parse_args(argv)
        config = demo_config(args)
    else:
        args, line = parse_run_args(argv)
        config = config_from_args(args)
        if line:
            print(f"{PROG}: {line}", file=sys.stderr)
    config.invocation = (PROG, command, *argv)
    modes = [flag for flag, on in (("--headless", args.headless),
                                   ("--foreground", args.foreground),
                                   ("--detach", args.detach)) if on]
    if len(modes) > 1:
        raise ConfigError(f"{' and '.join(modes)} cannot be used together: pick one")
    config.stdin = _stdin_mode(args)
    return Job(config, headless=bool(args.headless), foreground=bool(args.foreground),
               detach=bool(args.detach), on_failure=args.on_failure or None)
