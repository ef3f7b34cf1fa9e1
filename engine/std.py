"""Which standard streams of a rank go to files: the ``Std`` flag, its parser and ``to_map``.

Same values, strings and mapping rules as torch's ``Std``/``to_map``, with one fix (see
engine/README.md): a local rank is any number of digits, so ``"10:1"`` addresses local rank
10, which torch's one-digit pattern rejects. Errors name the part of the string that is wrong.
"""

from __future__ import annotations

import enum
import logging
import re
from typing import Final, Union

__all__ = ["Std", "to_map"]

logger = logging.getLogger(__name__)

# torch's own patterns, kept for the wording of errors (torchrun users know them).
_VALUE_REGEX: Final = r"^[0123]$"
_MAPPING_REGEX: Final = r"^(\d+:[0123],)*(\d+:[0123])$"

_VALUE: Final = re.compile(r"[0123]")
_PAIR: Final = re.compile(r"(\d+):([0123])")


class Std(enum.IntFlag):
    """A bit mask of standard streams: ``OUT`` (stdout), ``ERR`` (stderr), ``ALL`` (both)."""

    NONE = 0
    OUT = 1
    ERR = 2
    ALL = OUT | ERR

    @classmethod
    def from_str(cls, vm: str) -> Union[Std, dict[int, Std]]:
        """Parse a torchrun ``--redirects`` / ``--tee`` value.

        ``"0"``..``"3"`` give one ``Std`` for every rank; ``"0:3,1:0,10:1"`` gives a map from
        local rank to ``Std`` (a later pair for the same rank wins, as in torch).

        Raises:
            ValueError: naming the part that is neither a value nor a ``rank:value`` pair.
        """
        # torch's patterns end in `$`, which also matches before one trailing newline, so
        # "1\n" is accepted there; accept exactly the same strings.
        text = vm[:-1] if vm.endswith("\n") else vm
        if _VALUE.fullmatch(text):
            return cls(int(text))
        parts = text.split(",")
        mapping: dict[int, Std] = {}
        for part in parts:
            match = _PAIR.fullmatch(part)
            if match is None:
                raise ValueError(
                    f"{vm!r} is not a valid Std value: bad part {part!r}"
                    " (expected one of 0-3, or local_rank:value pairs such as '0:3,1:0,10:1';"
                    f" patterns <{_VALUE_REGEX}> or <{_MAPPING_REGEX}>)"
                )
            mapping[int(match.group(1))] = cls(int(match.group(2)))
        return mapping


def to_map(val_or_map: Union[Std, dict[int, Std]], local_world_size: int) -> dict[int, Std]:
    """Expand a ``Std`` or a partial rank map into a value for every local rank.

    A single ``Std`` applies to all ranks; ranks missing from a map get ``Std.NONE``. Map keys
    outside ``0..local_world_size-1`` are dropped as in torch, with a warning here, since they
    usually mean a typo on the command line.
    """
    if isinstance(val_or_map, Std):
        return dict.fromkeys(range(local_world_size), val_or_map)
    ignored = sorted(k for k in val_or_map if not 0 <= k < local_world_size)
    if ignored:
        logger.warning(
            "Std map names local ranks %s, outside 0..%d; they are ignored",
            ignored,
            local_world_size - 1,
        )
    return {i: val_or_map.get(i, Std.NONE) for i in range(local_world_size)}
