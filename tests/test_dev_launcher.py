"""`make dev`'s launcher (`assets_defs/dev.py`) stops what it started: the UI's and the
Connect server's whole process groups, also when a group's leader ended before its members
(as `dagster dev` can, leaving its webserver on the port)."""

import os
import subprocess

from assets_defs.dev import stop


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_ends_the_members_of_a_group_whose_leader_has_exited():
    # The leader starts a member in its group and exits at once, as a launcher whose
    # children outlive it.
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    member = int(leader.stdout.readline())
    assert leader.wait(timeout=10) == 0
    assert group_alive(leader.pid) and os.getpgid(member) == leader.pid

    stop(leader)

    assert not group_alive(leader.pid)


def test_stop_ends_a_running_leader_and_its_members():
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], start_new_session=True)

    stop(leader)

    assert leader.returncode is not None
    assert not group_alive(leader.pid)
