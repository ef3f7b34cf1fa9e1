"""NUMA placement: which CPUs each local rank may use, read from sysfs, applied as CPU affinity.

Same options as ``torch.numa.binding`` (``AffinityMode``, ``NumaOptions``; torch's own
objects are accepted too), without torch's requirements: no ``numactl``, no CUDA, and
it works on CPU-only machines. The CPU set is applied as the rank's affinity: for a binary by
the spawner (``RankProcess.spawn(cpu_affinity=...)``, inherited at fork), for a function in
the child (``bind_current_process``).

Which NUMA node a rank belongs to:

* When the machine has NVIDIA GPUs (PCI vendor 0x10de, display class 0x03xx, from
  ``<sysfs>/bus/pci/devices``) and ``local_rank`` is one of them (GPU index = local rank, as
  torch assumes; CUDA_VISIBLE_DEVICES with plain indices is honoured), the node of that
  GPU's PCI device. GPUs are numbered in PCI bus order (CUDA's order with
  CUDA_DEVICE_ORDER=PCI_BUS_ID, and its default order on machines with one GPU model).
* Otherwise (CPU-only, or more ranks than GPUs) ranks are dealt round-robin over the nodes
  that have CPUs: rank r goes to the (r mod n)-th node.

Modes (each result intersected with the CPUs this process may use):
``node`` all CPUs of the node; ``socket`` all CPUs of every node in the same package as the
node; ``exclusive`` the node's physical cores split evenly among the ranks placed on it
(lower ranks get the remainder); ``core-complex`` one group of cores sharing the last-level
cache, ranks on the node taking groups in turn (largest groups first).
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Optional

__all__ = [
    "AffinityMode",
    "NumaOptions",
    "bind_current_process",
    "cpus_for_rank",
    "plan",
]

logger = logging.getLogger(__name__)

DEFAULT_SYSFS_ROOT = "/sys"
"""Where sysfs is read from when no root is given (tests point it at a fake tree)."""


class AffinityMode(str, enum.Enum):
    """How wide a rank's CPU set is (torch's values)."""

    NODE = "node"
    SOCKET = "socket"
    EXCLUSIVE = "exclusive"
    CORE_COMPLEX = "core-complex"


@dataclass(frozen=True)
class NumaOptions:
    """torch's ``NumaOptions``: the mode, and whether a failure to bind is only a warning."""

    affinity_mode: AffinityMode
    should_fall_back_if_binding_fails: bool = False


def _coerce(options: Any) -> NumaOptions:
    """Accept ours, torch's, or anything with the same two attributes."""
    mode = options.affinity_mode
    fallback = bool(getattr(options, "should_fall_back_if_binding_fails", False))
    return NumaOptions(AffinityMode(getattr(mode, "value", mode)), fallback)


def parse_cpulist(text: str) -> set[int]:
    """``"0-3,8,10-11"`` -> ``{0, 1, 2, 3, 8, 10, 11}`` (the sysfs list format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


class _Topology:
    """The parts of sysfs we need, read lazily from ``root`` (``/sys``, or a fake for tests)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _read(self, *parts: str) -> str:
        with open(os.path.join(self.root, *parts)) as f:
            return f.read().strip()

    def nodes(self) -> dict[int, set[int]]:
        base = os.path.join(self.root, "devices/system/node")
        found: dict[int, set[int]] = {}
        try:
            names = os.listdir(base)
        except FileNotFoundError:
            names = []
        for name in names:
            if name.startswith("node") and name[4:].isdigit():
                cpus = parse_cpulist(self._read("devices/system/node", name, "cpulist"))
                found[int(name[4:])] = cpus
        return dict(sorted(found.items()))

    def package(self, cpu: int) -> int:
        return int(self._read(f"devices/system/cpu/cpu{cpu}/topology/physical_package_id"))

    def core_siblings(self, cpu: int) -> set[int]:
        return parse_cpulist(
            self._read(f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        )

    def last_level_cache(self, cpu: int) -> set[int]:
        base = f"devices/system/cpu/cpu{cpu}/cache"
        best_level, best = -1, {cpu}
        for entry in sorted(os.listdir(os.path.join(self.root, base))):
            if not (entry.startswith("index") and entry[5:].isdigit()):
                continue
            if self._read(base, entry, "type") not in ("Unified", "Data"):
                continue  # instruction caches do not define a core complex
            level = int(self._read(base, entry, "level"))
            if level > best_level:
                best_level = level
                best = parse_cpulist(self._read(base, entry, "shared_cpu_list"))
        return best

    def gpu_nodes(self) -> list[int]:
        """NUMA node of each NVIDIA GPU, in PCI address order."""
        base = os.path.join(self.root, "bus/pci/devices")
        try:
            addrs = sorted(os.listdir(base))
        except FileNotFoundError:
            return []
        nodes = []
        for addr in addrs:
            try:
                if self._read("bus/pci/devices", addr, "vendor").lower() != "0x10de":
                    continue
                if not self._read("bus/pci/devices", addr, "class").lower().startswith("0x03"):
                    continue
                node = int(self._read("bus/pci/devices", addr, "numa_node"))
            except (OSError, ValueError):
                continue
            nodes.append(max(node, 0))  # -1: firmware did not say; torch also uses 0
        return nodes


def _visible_gpu_nodes(topo: _Topology) -> list[int]:
    nodes = topo.gpu_nodes()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not nodes:
        return nodes
    try:
        indices = [int(v) for v in visible.split(",") if v.strip()]
    except ValueError:
        return nodes  # UUIDs / MIG names: keep the physical order
    return [nodes[i] for i in indices if 0 <= i < len(nodes)]


def plan(
    options: Any,
    nprocs: int,
    *,
    sysfs_root: Optional[str] = None,
    allowed: Optional[Collection[int]] = None,
) -> dict[int, Optional[frozenset[int]]]:
    """The CPU set of every local rank, computed before any rank starts.

    Args:
        options: ``NumaOptions`` (ours or torch's); None binds nothing.
        nprocs: the number of local ranks.
        sysfs_root: where sysfs is (default ``DEFAULT_SYSFS_ROOT``; tests pass a fake tree).
        allowed: CPUs this process may use (default ``os.sched_getaffinity(0)``).

    Returns:
        ``{rank: frozenset of CPUs}``, or ``{rank: None}`` for "do not bind" (no options,
        or binding failed and the options allow falling back).

    Raises:
        RuntimeError: binding is impossible (no node, empty set, fewer cores than ranks)
            and falling back is not allowed.
    """
    if options is None:
        return dict.fromkeys(range(nprocs))
    opts = _coerce(options)
    try:
        return {
            r: frozenset(
                cpus_for_rank(r, opts, nprocs=nprocs, sysfs_root=sysfs_root, allowed=allowed)
            )
            for r in range(nprocs)
        }
    except (OSError, ValueError, RuntimeError) as e:
        if not opts.should_fall_back_if_binding_fails:
            raise RuntimeError(f"NUMA binding ({opts.affinity_mode.value}) failed: {e}") from e
        logger.warning("NUMA binding failed (%s); running the ranks unbound", e)
        return dict.fromkeys(range(nprocs))


def cpus_for_rank(
    local_rank: int,
    options: Any,
    *,
    nprocs: int,
    sysfs_root: Optional[str] = None,
    allowed: Optional[Collection[int]] = None,
) -> set[int]:
    """The CPUs ``local_rank`` may use under ``options`` (see the module docstring).

    Raises:
        RuntimeError, OSError, ValueError: the topology does not allow a binding.
    """
    opts = _coerce(options)
    topo = _Topology(sysfs_root or DEFAULT_SYSFS_ROOT)
    allowed_set = set(allowed) if allowed is not None else set(os.sched_getaffinity(0))
    nodes = {n: cpus for n, cpus in topo.nodes().items() if cpus}
    if not nodes:
        raise RuntimeError(f"no NUMA node with CPUs under {topo.root}/devices/system/node")
    node, peers = _node_and_peers(topo, local_rank, nprocs, list(nodes))
    node_cpus = nodes.get(node, set()) & allowed_set
    mode = opts.affinity_mode
    if mode is AffinityMode.NODE:
        cpus = node_cpus
    elif mode is AffinityMode.SOCKET:
        if not node_cpus:
            raise RuntimeError(f"no allowed CPU on NUMA node {node}")
        package = topo.package(min(node_cpus))
        cpus = set()
        for other in nodes.values():
            usable = other & allowed_set
            if usable and topo.package(min(usable)) == package:
                cpus |= usable
    elif mode is AffinityMode.EXCLUSIVE:
        cpus = _exclusive(topo, node, node_cpus, peers.index(local_rank), len(peers))
    else:
        groups = _groups(node_cpus, topo.last_level_cache)
        groups.sort(key=lambda g: (-len(g), min(g)))
        if not groups:
            raise RuntimeError(f"no allowed CPU on NUMA node {node}")
        cpus = groups[peers.index(local_rank) % len(groups)]
    if not cpus:
        raise RuntimeError(f"local rank {local_rank}: empty CPU set on NUMA node {node}")
    return cpus


def _node_and_peers(
    topo: _Topology, local_rank: int, nprocs: int, node_ids: list[int]
) -> tuple[int, list[int]]:
    """The rank's node, and all ranks sharing it (ordered), by GPU or round-robin."""
    gpu_nodes = _visible_gpu_nodes(topo)
    if local_rank < len(gpu_nodes):
        node = gpu_nodes[local_rank]
        peers = [
            r
            for r in range(max(nprocs, local_rank + 1))
            if r < len(gpu_nodes) and gpu_nodes[r] == node
        ]
        return node, peers
    nprocs = max(nprocs, local_rank + 1)
    cpu_ranks = [r for r in range(nprocs) if r >= len(gpu_nodes)]
    slot = cpu_ranks.index(local_rank)
    node = node_ids[slot % len(node_ids)]
    peers = [r for i, r in enumerate(cpu_ranks) if node_ids[i % len(node_ids)] == node]
    return node, peers


def _groups(cpus: Iterable[int], group_of: Any) -> list[set[int]]:
    """Partition ``cpus`` by ``group_of(cpu)`` (a set containing it), keeping only ``cpus``."""
    remaining = set(cpus)
    groups = []
    for cpu in sorted(remaining):
        if cpu not in remaining:
            continue
        group = (set(group_of(cpu)) | {cpu}) & remaining
        remaining -= group
        groups.append(group)
    return groups


def _exclusive(topo: _Topology, node: int, node_cpus: set[int], index: int, count: int) -> set[int]:
    cores = _groups(node_cpus, topo.core_siblings)  # sorted by lowest CPU
    per_rank, extra = divmod(len(cores), count)
    if per_rank < 1:
        raise RuntimeError(
            f"There are only {len(cores)} physical cores on numa_node_index={node},"
            f" but there are {count} ranks associated with this NUMA node."
        )
    start = index * per_rank + min(index, extra)
    end = start + per_rank + (1 if index < extra else 0)
    return set().union(*cores[start:end])


def bind_current_process(cpus: Collection[int]) -> None:
    """Bind this process, and the threads it already has, to ``cpus`` (function ranks).

    Threads whose affinity was changed by someone else already are left alone, as in torch.
    """
    original = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return
    for tid in tids:
        try:
            if os.sched_getaffinity(int(tid)) == original:
                os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # the thread ended meanwhile
