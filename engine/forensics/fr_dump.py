"""Flight Recorder dumps written for torch's own analyser, ``torchfrtrace``.

torchfrtrace reads one pickled dump per rank, ``<prefix><rank>``, in a folder. A gloo rank's
dump, as its worker server answers it (JSON), names its entries' group ``"0"`` while its
``pg_config`` is keyed ``""`` (torchfrtrace then fails with ``KeyError: ('0', 0)``), and its
entries carry no stack frames. ``normalised`` keys ``pg_config`` by the groups the entries
name (their ranks from the recorded config, else every rank that dumped) and gives each entry
an empty ``frames`` list; the entries themselves stay as torch wrote them.
"""

from __future__ import annotations

import copy
import os
import pickle
from collections.abc import Mapping
from typing import Any

__all__ = ["PREFIX", "normalised", "write_for_torchfrtrace"]

PREFIX = "rank_"


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
