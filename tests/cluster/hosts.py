"""Two hosts of the tests' own: network namespaces joined by a veth pair.

Each host has its own network stack (an address on a 10.213.x.0/24 link between the two, its
own loopback), its own hostname (a UTS namespace) and an /etc/hosts naming both (a mount
namespace with the file bind-mounted), so a multi-node job crosses a real link between two
addresses, as it does between two machines. Only root can make them: ``TwoHosts.problem()``
says why they cannot be made here, for a skip. Every name carries this process's id and a
count of the pairs it made, so that test processes running side by side never meet, nor two
pairs of one process (a class's shared pair and a test's own); ``close()`` removes the
namespaces (and with them the link) and ends what was started in them.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

__all__ = ["HOSTNAMES", "IFNAME", "TwoHosts"]

HOSTNAMES = ("node01", "node02")
IFNAME = "rvlink"
"""The link's name inside both namespaces (GLOO_SOCKET_IFNAME for the ranks)."""

_MADE = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class TwoHosts:
    """node01 and node02, each a namespace with one end of the link."""

    def __init__(self) -> None:
        pid = os.getpid() % 100_000
        tag = f"{pid}n{next(_MADE)}"
        self.subnet = f"10.213.{pid % 250}"
        self.addrs = (f"{self.subnet}.1", f"{self.subnet}.2")
        self.netns = (f"rv{tag}a", f"rv{tag}b")
        self._dir = Path(tempfile.mkdtemp(prefix="rv-hosts-"))
        self._procs: list[subprocess.Popen[str]] = []
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{a} {h}\n" for a, h in zip(self.addrs, HOSTNAMES, strict=True))
        self.hosts_file = self._dir / "hosts"
        self.hosts_file.write_text(hosts)
        try:
            for ns in self.netns:
                _ip("netns", "add", ns)
            pair = (f"rv{tag}x", f"rv{tag}y")
            _ip("link", "add", pair[0], "type", "veth", "peer", "name", pair[1])
            for ns, end, addr in zip(self.netns, pair, self.addrs, strict=True):
                _ip("link", "set", end, "netns", ns)
                _ip("-n", ns, "link", "set", end, "name", IFNAME)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", IFNAME)
                _ip("-n", ns, "link", "set", IFNAME, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def problem() -> str | None:
        """Why two hosts cannot be made on this machine; None if they can."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        for tool in ("ip", "unshare", "mount"):
            if shutil.which(tool) is None:
                return f"{tool} is not installed"
        probe = f"rvprobe{os.getpid() % 100_000}"
        try:
            _ip("netns", "add", probe)
        except (subprocess.CalledProcessError, OSError) as e:
            return f"no network namespace can be made here: {getattr(e, 'stderr', e)!s}".strip()
        _ip("netns", "del", probe)
        return None

    def argv(self, host: int, argv: list[str]) -> list[str]:
        """``argv`` run as on host ``host`` (0 or 1): its network, hostname and /etc/hosts."""
        script = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
        return ["ip", "netns", "exec", self.netns[host], "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", script, "host", HOSTNAMES[host],
                str(self.hosts_file), *argv]

    def popen(self, host: int, argv: list[str], **kw: object) -> subprocess.Popen[str]:
        """Start ``argv`` on ``host`` in a session of its own; ``close()`` ends it."""
        proc: subprocess.Popen[str] = subprocess.Popen(  # type: ignore[call-overload]
            self.argv(host, argv), text=True, start_new_session=True, **kw)
        self._procs.append(proc)
        return proc

    def run(self, host: int, argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` to its end (``timeout`` as subprocess.run's)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("timeout", 60)
        return subprocess.run(self.argv(host, argv), text=True, **kw)  # type: ignore[call-overload]

    def link_down(self) -> None:
        """Cut the link (both ends' stacks stay up): the hosts no longer reach each other."""
        _ip("-n", self.netns[1], "link", "set", IFNAME, "down")

    def link_up(self) -> None:
        _ip("-n", self.netns[1], "link", "set", IFNAME, "up")

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for ns in self.netns:
            # Whatever still runs inside (a detached supervisor, its ranks) goes with it.
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                  timeout=30).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TwoHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
