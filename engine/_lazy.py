"""Lazy package faces: a package names what it offers, and loads a module on first use.

Each sub-package's ``__init__`` maps public names to the modules that define them and hands
the map to ``face``; importing the package then costs nothing beyond this file, and
``from engine.output import OutputPump`` loads ``engine.output.pump`` only at that moment.
A leaf module: it imports nothing of the engine, so no package face can close a circle.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["face"]


def face(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names load on first use.

    Args:
        package: the package's ``__name__``.
        names: public name -> module (relative to ``package``) that defines it.

    Returns:
        Functions to bind as the package's module-level ``__getattr__`` and ``__dir__``.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
