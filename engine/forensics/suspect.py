"""The suspect: the rank most likely to have started a failure, with its evidence in words.

torch names the rank whose failure came first (kept as the root cause). When a rank hangs,
that is the wrong one: the others wait for it in a collective until a timeout or a watchdog
makes one of them fail first, and the hung rank is only stopped by the teardown after. The
evidence read here needs nothing from the training code:

- *silence*: a rank whose output (complete lines and progress-bar redraws alike) stopped
  well before the first failure (from when that rank recorded its error, where it wrote
  torch's error file: its exit can come seconds later) while its peers went on: silent for at least
  ``silence_factor`` times its peers' median gap between batches, at least that many times
  its own usual gap (a rank that writes every minute is not stalled after 10 s), at least
  ``silence_factor`` times its peers' own silence (when every rank stopped writing together,
  none of them stands out), and at least ``silence_min_s`` seconds;
- *a person's signal*: a rank that a person killed, stopped or signalled through rankvisor
  (not the whole run at once) before the first failure, when it ended or fell silent after;
- *a person's pause*: a rank waiting at a prompt on its stdin (``breakpoint()``, ``input()``)
  when the first failure came (``engine.forensics.pauses``): its silence is the person's, and
  so is its peers' silence after the pause began (they waited for it), so neither is read
  as silence; the pause itself is named, with where pdb stopped (a rank that raised
  before its prompt, a post-mortem, is named for its failure, timed from the prompt);
- *its own failure*: the earliest exit that is not a knock-on (``engine.forensics.knockon``:
  a collective that timed out, a peer that closed its connection); a rank the teardown
  stopped counts here only when it had recorded its own error (torch's error file) before
  the teardown's signal reached it.

Strongest of all, when the ranks serve it: *what torch recorded of the collectives* (its
Flight Recorder, ``engine.forensics.collectives``) and *what torch printed* about them
(``engine.forensics.torch_texts``: a collective mismatch under TORCH_DISTRIBUTED_DEBUG=DETAIL,
a monitored barrier, NCCL's watchdog), named before any silence, whatever every rank
printed meanwhile (a heartbeat thread, a progress bar). In this order: a rank the Flight
Recorder shows in another collective under the same number; a rank torch's texts name; a
rank that never entered collective #N of a process group while its peers waited in it
(read from when each rank was asked, which torch's own check outweighs: when every rank
fails at once on a loaded machine, a rank can be asked on its way in). A person's signal
or pause of that rank, or its own failure, still tells its story in its own words.

Each piece of evidence has a time (the last output, the signal, the exit); the earliest
wins, and any other within ``TOGETHER_S`` of it is named too, the earlier first. Being
stopped by rankvisor (teardown, escalation) is never evidence, but what the rank did before
the first failure still counts. Without any of these, a rank that was still running,
without an error, when the others failed in a collective is named ("outlived"); else the
earliest knock-on failure is.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Final

from ..events import Suspect
from ..names.signals import exit_signal_name
from .activity import RankActivity
from .collectives import Verdict
from .knockon import knock_on_reason
from .pauses import Pause
from .torch_texts import torch_named

__all__ = [
    "DEFAULT_SILENCE_FACTOR",
    "DEFAULT_SILENCE_MIN_S",
    "TOGETHER_S",
    "RankFacts",
    "SignalRecord",
    "find_suspect",
]

DEFAULT_SILENCE_FACTOR: Final = 3.0
DEFAULT_SILENCE_MIN_S: Final = 2.0
TOGETHER_S: Final = 1.0
"""Evidence this close to the earliest is named with it ("failed together")."""

_LINE_CAP: Final = 160
_STOPS: Final = frozenset({"SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU"})


@dataclass(frozen=True, slots=True)
class RankFacts:
    """One rank at the end of an attempt, as the supervisor saw it."""

    rank: int
    failed: bool
    """It ended badly on its own (torch's failures: not stopped by rankvisor)."""
    exitcode: int | None
    exit_time_ns: int | None
    message: str
    """Its error: the error file's message, else its last stderr lines ("" if none)."""
    stopped_by: str | None
    """Why rankvisor stopped it ("teardown", "terminate", "kill", "signal", ...), if it did."""
    activity: RankActivity
    said: str = ""
    """The one line of its error worth quoting ("" when none is: a bare signal's stderr)."""
    raised_before_stop: bool = False
    """Stopped by the teardown, but its error file (``message``) was written before the
    teardown's signal reached it: it was failing on its own already (two ranks that raise
    together; the second's exit is seen after the first's teardown began)."""
    ended_by: str = ""
    """The signal rankvisor sent that ended it in its exit, after it had failed on its own
    (torch counts the failure; the signal is still ours, never evidence): "SIGTERM". Its
    ``message`` is then its own error only, "" when the signal cut its traceback short."""
    error_ns: int | None = None
    """When it recorded its error (its error file written, torch's ``record``), if before
    its exit: its failure began there. The exit may come seconds later (a loaded machine, a
    process group's slow teardown), while its peers, whose collectives failed with it, have
    stopped writing: silence is measured up to the earliest failure's start, not its exit."""


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A signal sent to ranks (see ``engine.events.RanksSignalled``), timed in ns."""

    ranks: tuple[int, ...]
    signal_name: str
    by: str
    reason: str
    t_ns: int


@dataclass(frozen=True, slots=True)
class _Evidence:
    t_ns: int
    rank: int
    kind: str
    words: str


def _clock(t_ns: int, tz: tzinfo | None) -> str:
    return datetime.fromtimestamp(t_ns / 1e9, tz).strftime("%H:%M:%S")


def _quote(line: str) -> str:
    line = line.strip()
    if not line:
        return "(none)"
    return line if len(line) <= _LINE_CAP else line[: _LINE_CAP - 1] + "\u2026"


def _how(f: RankFacts) -> str:
    name = exit_signal_name(f.exitcode)
    if name:
        return f"killed by {name}, not sent by rankvisor" if name == "SIGKILL" else name
    return f"exit code {f.exitcode}"


def _silent(
    f: RankFacts, peers: list[RankFacts], first_ns: int, factor: float, min_s: float
) -> float | None:
    """Seconds ``f`` was silent before the first failure began (``first_ns``), if that
    sets it apart."""
    last = f.activity.last_ns
    talking = [p for p in peers if p.activity.last_ns is not None]
    if last is None or not talking:
        return None
    gaps = [p.activity.median_gap_s for p in talking if p.activity.median_gap_s is not None]
    if not gaps:
        return None  # no peer wrote twice: nothing to compare with
    silence = (first_ns - last) / 1e9
    peer_silence = statistics.median(
        max(0.0, (first_ns - p.activity.last_ns) / 1e9)  # type: ignore[operator]
        for p in talking
    )
    need = max(min_s, factor * statistics.median(gaps), factor * peer_silence)
    own = f.activity.median_gap_s
    if own is not None and f.activity.gaps >= 3:
        need = max(need, factor * own)
    return silence if silence >= need else None


def _named_by(verdicts: Iterable[Verdict], ranks: Mapping[int, object]) -> dict[int, str]:
    """Each of ``ranks`` the Flight Recorder's verdicts name, with the first verdict's words."""
    named: dict[int, str] = {}
    for v in verdicts:
        for r in v.missing:
            if r in ranks:
                named.setdefault(r, v.suspect_words(r))
    return named


def find_suspect(
    facts: Sequence[RankFacts],
    signals: Sequence[SignalRecord] = (),
    *,
    pauses: Sequence[Pause] = (),
    silence_factor: float = DEFAULT_SILENCE_FACTOR,
    silence_min_s: float = DEFAULT_SILENCE_MIN_S,
    tz: tzinfo | None = None,
    collectives: Sequence[Verdict] = (),
    texts: Mapping[int, str] | None = None,
) -> Suspect | None:
    """The suspect of an attempt (see the module docstring); None when no rank failed on
    its own (success, or a run rankvisor stopped). ``pauses``: those in force at the first
    failure (``PauseLog.at``); ``collectives``: the Flight Recorder's verdicts; ``texts``: each
    rank's last stderr lines, where torch's own texts are looked for (with the errors)."""
    by_rank = {f.rank: f for f in facts}
    real = [f for f in facts if f.failed and f.exit_time_ns is not None]
    if not real:
        return None
    first_ns = min(f.exit_time_ns or 0 for f in real)
    began_ns = min(min(f.exit_time_ns or 0, f.error_ns or first_ns) for f in real)
    evidence: list[_Evidence] = []

    at_prompt = {p.rank: p for p in pauses if p.how == "prompt" and p.since_ns < first_ns}
    paused_since = min((p.since_ns for p in pauses), default=None)
    silent: dict[int, float] = {}
    for f in facts:
        if f.rank in at_prompt:
            continue  # a person is reading it: not a hang
        if (
            paused_since is not None and f.activity.last_ns is not None
            and f.activity.last_ns >= paused_since - TOGETHER_S * 1e9
        ):
            continue  # it fell silent once a person paused a peer: it waited for that peer
        seconds = _silent(
            f, [p for p in facts if p.rank != f.rank and p.rank not in at_prompt],
            began_ns, silence_factor, silence_min_s,
        )
        if seconds is not None:
            silent[f.rank] = seconds
            assert f.activity.last_ns is not None
            evidence.append(_Evidence(
                f.activity.last_ns, f.rank, "silence",
                f"rank {f.rank}: silent {seconds:.1f} s before the first failure; "
                f"last line: {_quote(f.activity.last_line)}",
            ))

    signalled: set[int] = set()
    for s in sorted(signals, key=lambda s: s.t_ns):
        # A signal to every rank at once (quit, stop, restart all) singles nobody out.
        if s.by != "person" or s.t_ns >= first_ns or len(set(s.ranks)) >= len(facts):
            continue
        for r in s.ranks:
            target = by_rank.get(r)
            if target is None or r in signalled:
                continue
            ended = (
                not target.failed and target.stopped_by is not None
                and target.exit_time_ns is not None and target.exit_time_ns <= first_ns
            ) or s.reason == "restart"  # a person's restart ended that incarnation
            if not (ended or s.signal_name in _STOPS or r in silent):
                continue  # a SIGUSR1 for a stack dump, after which it went on
            signalled.add(r)
            verb = {"terminate": "terminated", "restart": "restarted"}.get(s.reason, "killed")
            if s.signal_name in _STOPS:
                verb = "stopped"
            words = (
                f"rank {r}: {verb} by your {s.signal_name} at {_clock(s.t_ns, tz)}"
                if ended or s.signal_name in _STOPS
                else f"rank {r}: got your {s.signal_name} at {_clock(s.t_ns, tz)} and went silent"
            )
            evidence.append(_Evidence(s.t_ns, r, "signal", words + "; the others failed after"))

    # A rank that failed on its own after its prompt (a post-mortem) is told by its failure.
    own_failure = {
        f.rank for f in real if f.rank in at_prompt and knock_on_reason(f.message) is None
    }
    for r, p in at_prompt.items():
        if r not in by_rank or r in own_failure:
            continue
        where = f" at {p.where}" if p.where else ""
        prompt = f'at "{_quote(p.prompt)}"' if p.prompt.strip() else "for input"
        evidence.append(_Evidence(
            p.since_ns, r, "paused",
            f"rank {r}: paused by a person{where} (waiting {prompt} since "
            f"{_clock(p.since_ns, tz)}); the others failed after",
        ))

    own = real + [f for f in facts if f.raised_before_stop and f.exit_time_ns is not None]
    for f in sorted(own, key=lambda f: (f.exit_time_ns or 0, f.rank)):
        if knock_on_reason(f.message) is not None:
            continue
        if f.ended_by and not f.message:
            continue  # what it raised is lost; the signal that ended it is ours
        said = f.said
        later = (f.exit_time_ns or first_ns) - first_ns
        when = "first" if later < 1e7 else f"{later / 1e9:.1f} s after the first failure"
        how = _how(f) if f.failed else "its error recorded before the teardown reached it"
        if f.ended_by:
            how = f"it raised before rankvisor's {f.ended_by} ended it"
        t = f.exit_time_ns or first_ns
        if f.rank in own_failure:
            # It raised, then a person held it at its prompt: it failed when it raised.
            t = min(t, at_prompt[f.rank].since_ns)
            when = f"first, held at a prompt from {_clock(t, tz)} until it ended"
        words = f"rank {f.rank}: failed on its own {when} ({how})"
        if said:
            words += f": {_quote(said)}"
        evidence.append(_Evidence(t, f.rank, "failure", words))

    if signalled:
        # A rank a person signalled: that is its story, from whichever came first.
        since = {e.rank: e.t_ns for e in evidence if e.kind == "silence"}
        evidence = [
            _Evidence(min(e.t_ns, since.get(e.rank, e.t_ns)), e.rank, e.kind, e.words)
            if e.kind == "signal" else e
            for e in evidence
            if not (e.kind == "silence" and e.rank in signalled)
        ]
    # What torch recorded (the Flight Recorder) and what it printed (a collective mismatch, a
    # monitored barrier, NCCL's watchdog) name ranks above any silence. A Flight Recorder
    # desync (another op under the same number) and torch's own checks compare what each
    # rank ran; "never entered" is read from when a rank was asked, which a loaded machine
    # fools when every rank fails at once (a rank asked on its way into the collective that
    # torch's check then shows it ran): it comes last.
    kind = "collective"
    named_by = _named_by((v for v in collectives if v.kind != "missing"), by_rank)
    if not named_by:
        said = {f.rank: f.message for f in facts if f.message}
        for r, text in (texts or {}).items():
            said[r] = f"{said.get(r, '')}\n{text}"
        named_by = {r: w for r, w in torch_named(said).items() if r in by_rank}
        kind = "torch" if named_by else kind
    if not named_by:
        named_by = _named_by((v for v in collectives if v.kind == "missing"), by_rank)
    if named_by:
        # A person's action on them, or their own failure, is the better story where
        # there is one (not a collective error their peers' would share).
        told = sorted((e for e in evidence if e.rank in named_by
                       and e.kind in ("signal", "paused", "failure")),
                      key=lambda e: (e.t_ns, e.rank))
        named = []
        for r, words in named_by.items():
            mine = [e for e in told
                    if e.rank == r and (kind == "collective" or e.kind != "failure")]
            named.append(mine[0] if mine else _Evidence(first_ns, r, kind, words))
        return _suspect(named, by_rank, first_ns)
    if evidence:
        evidence.sort(key=lambda e: (e.t_ns, e.rank))
        start = evidence[0].t_ns
        named: list[_Evidence] = []
        for e in evidence:
            if e.t_ns - start <= TOGETHER_S * 1e9 and all(n.rank != e.rank for n in named):
                named.append(e)
        return _suspect(named, by_rank, first_ns)

    # Every failure is a knock-on. Whoever was still running without an error is whom the
    # others waited for: the earliest to fall silent among them.
    first = min(real, key=lambda f: (f.exit_time_ns or 0, f.rank))
    knock = knock_on_reason(first.message)
    outlived = [
        f for f in facts
        if not f.failed and (f.exit_time_ns is None or f.exit_time_ns > first_ns)
    ]
    if outlived and len(outlived) < len(facts):
        def quiet_since(f: RankFacts) -> int:
            return f.activity.last_ns if f.activity.last_ns is not None else 0

        outlived.sort(key=lambda f: (quiet_since(f), f.rank))
        start = quiet_since(outlived[0])
        named = [
            _Evidence(
                quiet_since(f), f.rank, "outlived",
                f"rank {f.rank}: still running, without an error, when the others failed in "
                f"a collective ({knock}); last line: {_quote(f.activity.last_line)}",
            )
            for f in outlived
            if quiet_since(f) - start <= TOGETHER_S * 1e9
        ]
        return _suspect(named, by_rank, first_ns)
    return _suspect(
        [_Evidence(
            first_ns, first.rank, "knock-on",
            f"rank {first.rank}: failed first, in a collective ({knock}); "
            "no rank stands out before it",
        )],
        by_rank,
        first_ns,
    )


def _suspect(named: list[_Evidence], by_rank: dict[int, RankFacts], first_ns: int) -> Suspect:
    head = named[0]
    activity = by_rank[head.rank].activity
    lines = tuple(e.words for e in named)
    return Suspect(
        rank=head.rank,
        reason=lines[0] + "".join(f"; also {line}" for line in lines[1:]),
        ranks=tuple(e.rank for e in named),
        evidence=lines,
        kind=head.kind,
        first_failure_ns=first_ns,
        last_line=activity.last_line,
        last_line_stream=activity.last_line_stream,
        last_line_no=activity.last_line_no,
        last_output_ns=activity.last_ns or 0,
    )
