"""Flight Recorder dumps: read as bounded data, and written for torch's analyser.

A rank writes its own dump (an NCCL group on a timeout: a pickle), so a dump is hostile
input: ``read_fr_pickle`` opens only a regular file (never a FIFO: the open does not block,
the kind is checked on the open descriptor), takes at most ``MAX_DUMP_BYTES``, unpickles
with Python's own unpickler (C's grows its memo to any index a 2 KB file names: 1.6 GB was
seen) refusing every global (torch's dumps hold dicts, lists, tuples, strings, numbers,
booleans and None only), and refuses a result whose tree, shared parts counted each time,
holds more than ``MAX_NODES`` values.

``torchfrtrace``, torch's own analyser,
reads one pickled dump per rank, ``<prefix><rank>``, in a folder. A gloo rank's
dump, as its worker server answers it (JSON), names its entries' group ``"0"`` while its
``pg_config`` is keyed ``""`` (torchfrtrace then fails with ``KeyError: ('0', 0)``), and its
entries carry no stack frames. ``normalised`` keys ``pg_config`` by the groups the entries
name (their ranks from the recorded config, else every rank that dumped) and gives each entry
an empty ``frames`` list; the entries themselves stay as torch wrote them.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
from collections.abc import Mapping
from typing import Any, Final

from ..rundir.regular_file import read_regular

__all__ = ["MAX_DUMP_BYTES", "MAX_NODES", "NotFlightRecorder", "PREFIX", "normalised",
           "read_fr_pickle", "write_for_torchfrtrace"]

PREFIX = "rank_"
MAX_DUMP_BYTES: Final = 16 << 20
"""A dump of torch's default 2000 entries with their stacks is a few MB."""
MAX_NODES: Final = 2_000_000
"""Values in a dump's tree (an entry is a few dozen)."""


class NotFlightRecorder(ValueError):
    """The file is not a Flight Recorder dump of plain data within the bounds."""


class _PlainUnpickler(pickle._Unpickler):  # the pure-Python one: its memo is a dict
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"not plain data: {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("not plain data: a persistent id")


_LEAVES: Final = (str, int, float, bool, bytes, type(None))


def _check_tree(data: Any, budget: int = MAX_NODES) -> None:
    """Raise NotFlightRecorder when ``data`` holds anything but plain values, or more
    than ``budget`` of them counting a shared part each time it is reached."""
    stack = [data]
    while stack:
        budget -= 1
        if budget < 0:
            raise NotFlightRecorder(f"holds more than {MAX_NODES} values")
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif not isinstance(x, _LEAVES):
            raise NotFlightRecorder(f"holds a {type(x).__name__}")


def read_fr_pickle(path: str) -> dict[str, Any]:
    """The dump a rank wrote at ``path``, read as bounded plain data.

    Raises:
        OSError: it cannot be read, or is not a regular file (``NotRegular``).
        NotFlightRecorder, TooBig (ValueErrors): it is not a plain dump within bounds.
    """
    raw = read_regular(path, MAX_DUMP_BYTES)
    try:
        data = _PlainUnpickler(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, MemoryError, RecursionError, OverflowError) as e:
        raise NotFlightRecorder(f"does not unpickle as plain data: {e}") from None
    if not isinstance(data, dict):
        raise NotFlightRecorder(f"is a {type(data).__name__}, not a dict")
    _check_tree(data)
    return data


def normalised(dump: Mapping[str, Any], world: int) -> dict[str, Any]:
    """One rank's dump, readable by torchfrtrace (see the module docstring)."""
    out = copy.deepcopy(dict(dump))
    entries = out.get("entries") or []
    config = dict(out.get("pg_config") or {})
    recorded = next((v for v in config.values() if isinstance(v, dict)
                     and str(v.get("ranks", "[]")) not in ("", "[]")), None)
    every = str(list(range(world)))
    for e in entries:
        e.setdefault("frames", [])
        pg = e.get("process_group") or ["", ""]
        name = str(pg[0]) if pg and pg[0] else str(e.get("pg_id", 0))
        if pg and not pg[0]:
            e["process_group"] = [name, pg[1] if len(pg) > 1 else ""]
        if name not in config:
            desc = pg[1] if len(pg) > 1 and pg[1] else ("default_pg" if name == "0" else "")
            ranks = recorded.get("ranks") if recorded is not None and name == "0" else every
            config[name] = {"name": name, "desc": desc, "ranks": ranks}
    out["pg_config"] = config
    out["entries"] = entries
    return out


def write_for_torchfrtrace(folder: str, dumps: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """Write each rank's normalised dump as ``<folder>/rank_<r>``; the paths written."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for rank, dump in sorted(dumps.items()):
        path = os.path.join(folder, f"{PREFIX}{rank}")
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(normalised(dump, len(dumps)), f)
        os.replace(tmp, path)
        paths.append(path)
    return paths
