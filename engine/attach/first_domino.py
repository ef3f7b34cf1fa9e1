"""The suspect of an attached torchrun job that a person's stop ended.

A person terminates one worker through rankvisor; torchrun sees it exit by a signal, counts
it as the group's failure and stops the others itself (their SIGTERM is torchrun's, "from
outside" for rankvisor). torch's own report names the terminated worker; rankvisor's root
cause rule (the earliest failure rankvisor did not cause) would name one of the others. The
person's stop is the first domino: ``first_domino`` names that worker as the suspect when
every failure came after it and was a death by a signal (torchrun's teardown).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from datetime import datetime

from ..errors import ProcessFailure
from ..events import Suspect

__all__ = ["first_domino"]

_TEARDOWN = frozenset({-signal.SIGTERM, -signal.SIGKILL, -signal.SIGINT})


def first_domino(
    stopped: Mapping[int, ProcessFailure], failures: Mapping[int, ProcessFailure],
    signal_of: Mapping[int, int],
) -> Suspect | None:
    """The worker a person stopped, when torchrun's teardown of the others followed it.

    Args:
        stopped: The workers rankvisor's stop ended (rank -> failure).
        failures: The other workers that ended badly.
        signal_of: The signal rankvisor stopped each of ``stopped`` with.
    """
    if not stopped or not failures:
        return None
    first = min(stopped, key=lambda r: (stopped[r].exit_time_ns or 0, r))
    t = stopped[first].exit_time_ns or 0
    if not all(f.exitcode in _TEARDOWN and (f.exit_time_ns or 0) >= t
               for f in failures.values()):
        return None
    name = signal.Signals(signal_of.get(first, signal.SIGTERM)).name
    when = datetime.fromtimestamp(t / 1e9).strftime("%H:%M:%S")
    others = ", ".join(map(str, sorted(failures)))
    words = (f"rank {first}: terminated by your {name} (it ended at {when}); torchrun then "
             f"stopped rank(s) {others}")
    return Suspect(rank=first, reason=words, ranks=(first,), evidence=(words,), kind="signal",
                   first_failure_ns=t)
