"""torchrun's ``PET_<FLAG>`` variables, read as torchrun reads them.

Inside a Kubeflow pod (or any launcher that speaks torchrun's environment) the flags come as
``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``... and no flag at all. torchrun reads
each such variable as the flag's default when its parser is built, so a flag on the command
line wins, and the value goes through the flag's type (not its choices) as a default string
does in argparse. A switch (``--standalone``, ``-m``...) is on when its variable is a non-zero
integer. The two actions here do the same, with one difference on purpose: a variable whose
value does not convert is a one-line error with status 2 naming the variable (torch raises a
traceback for a switch and an argparse error without the variable's name for a value).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

__all__ = ["PetParser", "PetSwitch", "PetValue", "pet_name"]


def pet_name(torch_dest: str) -> str:
    """The variable of a torchrun flag, from torch's name for it (``rdzv_id`` -> PET_RDZV_ID)."""
    return f"PET_{torch_dest.upper()}"


def _environ() -> Mapping[str, str]:
    return os.environ


class PetValue(argparse.Action):
    """A value flag whose default is ``PET_<PET>`` when set (the flag given wins).

    ``pet`` is torch's name of the flag, which may differ from ours (``rdzv_id`` is kept in
    ``run_id``). The variable is converted by ``type`` now, so a bad one is said before
    anything runs; its choices are not checked, as argparse does not check a default's.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, *, pet: str | None = None,
                 default: Any = None, type: Callable[[str], Any] | None = None,
                 **kwargs: Any) -> None:
        self.pet_var = pet_name(pet or dest)
        self.pet_error: str | None = None
        text = _environ().get(self.pet_var)
        if text is not None:
            default = text
            if type is not None:
                try:
                    default = type(text)
                except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
                    kind = getattr(type, "__name__", "")
                    why = f"invalid {kind} value" if kind in ("int", "float") else str(e)
                    self.pet_error = f"{self.pet_var}={text[:40]!r}: {why}"
                    default = None
        super().__init__(option_strings, dest, default=default, type=type, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)


class PetSwitch(argparse.Action):
    """A switch (no value) that is on when given, or when ``PET_<PET>`` is a non-zero integer."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, pet: str | None = None,
                 **kwargs: Any) -> None:
        self.pet_var = pet_name(pet or dest)
        self.pet_error: str | None = None
        text = _environ().get(self.pet_var, "0")
        try:
            on = bool(int(text))
        except ValueError:
            on = False
            self.pet_error = f"{self.pet_var}={text[:40]!r}: give 1 (on) or 0 (off)"
        super().__init__(option_strings, dest, nargs=0, const=True, default=on, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, True)


class PetParser(argparse.ArgumentParser):
    """argparse with one-line errors (status 2), which also refuses a bad ``PET_`` variable.

    A variable is refused only when its flag was not given: the flag wins, as in torchrun.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        ns, rest = super().parse_known_args(args, namespace)
        for action in self._actions:
            bad = getattr(action, "pet_error", None)
            if bad and getattr(ns, action.dest, None) is action.default:
                self.error(f"{bad} (for {'/'.join(action.option_strings)}; unset it or give "
                           "the flag)")
        return ns, rest
