"""The cluster door's secret is not in the rendezvous store (issue 35.4).

torch's store has no authentication: whoever reaches its port reads every key. The store
held the door's secret itself, so reading it was enough to send input and signals to every
rank. Now it holds a nonce, and each door proves an HMAC of it under the cluster key, which
the store never sees (``RANKVISOR_CLUSTER_KEY``, or ``cluster.key`` in the user's 0700 state
dir). A client that read the store's value is refused; the job's user, with the key, gets in;
then the table of keys refused in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rankvisor.engine.cluster.door import ClusterDoor, DoorRefused, connect_door, new_secret
from rankvisor.engine.cluster.door_key import (
    ENV_KEY,
    NoClusterKey,
    cluster_key,
    door_secret,
    key_path,
)

from tests.reliability.test_door_bounds import door

__all__ = ["door"]  # a fixture, used by name


def test_a_client_that_read_the_store_is_refused(door: tuple[ClusterDoor, str]) -> None:
    made, address = door
    nonce = new_secret()  # what the store holds, and anyone who reaches it reads
    made.secret = door_secret(cluster_key(), nonce)  # as run_cluster sets it
    for guess in (nonce, door_secret(b"x" * 64, nonce)):
        with pytest.raises(DoorRefused, match="secret differs"):
            connect_door(address, guess)
    # The job's user: the same key on this host (the state dir's file, made once).
    handle = connect_door(address, door_secret(cluster_key(), nonce))
    try:
        assert handle.snapshot().run_id == "door"
    finally:
        handle.detach()


def test_the_key_file_is_made_once_for_the_user_alone() -> None:
    assert not os.path.lexists(key_path())
    first = cluster_key()
    st = os.lstat(key_path())
    assert (st.st_mode & 0o777, st.st_uid, len(first)) == (0o600, os.getuid(), 64)
    assert cluster_key() == first  # read again, not made again
    assert door_secret(first, "n") == door_secret(cluster_key(), "n") != door_secret(first, "m")


def test_the_environment_names_the_key_on_every_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEY, "k" * 40)
    assert cluster_key() == b"k" * 40
    assert not os.path.lexists(key_path())  # no file made


def _open_to_others(path: str) -> None:
    cluster_key()
    os.chmod(path, 0o644)


def _a_link(path: str) -> None:
    target = path + ".elsewhere"
    Path(target).write_text("a" * 64)
    os.chmod(target, 0o600)
    os.symlink(target, path)


def _anothers(path: str) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give a file to another user")
    cluster_key()
    os.chown(path, 65534, 65534)


def _short(path: str) -> None:
    Path(path).write_text("abc\n")
    os.chmod(path, 0o600)


@pytest.mark.parametrize(("make", "words"), [
    (_open_to_others, r"is open to others \(mode 644\)"),
    (_a_link, "is not a plain file"),
    (_anothers, "belongs to uid 65534, not to you"),
    (_short, "is too short; remove it"),
], ids=["open to others", "a symlink", "another user's", "too short"])
def test_an_unsafe_key_file_is_refused_in_one_line(make, words: str) -> None:  # type: ignore[no-untyped-def]
    make(key_path())
    with pytest.raises(NoClusterKey, match=words) as refused:
        cluster_key()
    assert "\n" not in str(refused.value)


def test_a_short_key_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEY, "short")
    with pytest.raises(NoClusterKey, match=r"too short \(5 characters.*openssl rand -hex 32"):
        cluster_key()
