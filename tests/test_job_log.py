import threading

import pytest
import sqlalchemy as sa
from alembic import command

from offset_assets.control_plane import connect
from offset_assets.control_plane.database import alembic_config, upgrade_to_head
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.errors import ClaimLostError, RangeDoneError, RangeHeldError
from offset_assets.control_plane.job_log.records import JobStatus, StepRecord


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def claim(log: JobLog, start: str, run_id: str, **kwargs):
    return log.claim("orders", start, None, run_id=run_id, log_driven_type="auto_inc_id", **kwargs)


def race(n: int, action) -> list:
    """Run `action(i)` in n threads released together; return results or exceptions."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = action(i)
        except Exception as exc:  # noqa: BLE001 - the race outcome is what is asserted
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_migration_0003_creates_job_log_and_step_log_and_downgrades(db_url):
    plane = connect(db_url)
    assert {"job_log", "step_log"} <= set(sa.inspect(plane.engine).get_table_names())
    command.downgrade(alembic_config(plane), "0002")
    assert not {"job_log", "step_log"} & set(sa.inspect(plane.engine).get_table_names())
    upgrade_to_head(plane)
    assert claim(JobLog(plane), "0", "run-a").job_id == 1


def test_new_range_is_claimed_once_and_success_records_the_end(db_url):
    log = JobLog(connect(db_url))
    first = claim(log, "0", "run-a")
    assert (first.attempt, first.previous_status) == (1, None)
    with pytest.raises(RangeHeldError, match="RUNNING under run 'run-a'"):
        claim(log, "0", "run-b")
    log.mark_success(first.job_id, "100", run_id="run-a")
    row = log.get(first.job_id)
    assert (row.status, row.data_range_end, row.run_id) == ("SUCCESS", "100", "run-a")
    with pytest.raises(RangeDoneError, match="already ingested"):
        claim(log, "0", "run-b")


@pytest.mark.parametrize("rounds", [8])
def test_two_concurrent_claimers_never_both_win_a_new_range(db_url, rounds):
    log = JobLog(connect(db_url))
    for r in range(rounds):
        results = race(2, lambda i, r=r: claim(log, str(r * 100), f"scheduler-{i}"))
        winners = [x for x in results if not isinstance(x, Exception)]
        losers = [x for x in results if isinstance(x, Exception)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert isinstance(losers[0], RangeHeldError)
        assert log.get(winners[0].job_id).run_id == winners[0].run_id


def test_two_concurrent_retries_of_a_failed_range_never_both_win(db_url):
    log = JobLog(connect(db_url))
    first = claim(log, "0", "run-0")
    for r in range(6):
        log.mark_failure(first.job_id, "boom")
        results = race(2, lambda i, r=r: claim(log, "0", f"retry-{r}-{i}"))
        winners = [x for x in results if not isinstance(x, Exception)]
        assert len(winners) == 1, results
        assert winners[0].attempt == r + 2
        assert winners[0].previous_status == "FAILURE"
        assert log.get(first.job_id).run_id == winners[0].run_id


def test_running_row_with_old_heartbeat_is_taken_over(db_url):
    clock = FakeClock()
    log = JobLog(connect(db_url), clock=clock)
    dead = claim(log, "0", "run-dead")
    clock.now += 30
    assert log.heartbeat(dead.job_id, "run-dead")
    clock.now += 100
    with pytest.raises(RangeHeldError):
        claim(log, "0", "run-new", stale_after_s=120)
    assert not log.is_stale(log.get(dead.job_id), stale_after_s=120)
    clock.now += 50
    assert log.is_stale(log.get(dead.job_id), stale_after_s=120)
    taken = claim(log, "0", "run-new", stale_after_s=120)
    assert (taken.job_id, taken.attempt, taken.took_over) == (dead.job_id, 2, True)
    assert taken.previous_run_id == "run-dead"
    # The old holder wakes up: it can neither heartbeat nor commit.
    assert not log.heartbeat(dead.job_id, "run-dead")
    with pytest.raises(ClaimLostError, match="took the range over"):
        log.mark_success(dead.job_id, "100", run_id="run-dead")
    assert not log.mark_failure(dead.job_id, "late", run_id="run-dead")
    log.mark_success(taken.job_id, "100", run_id="run-new")
    assert log.get(dead.job_id).status == "SUCCESS"


def test_running_row_of_a_dead_run_is_taken_over_at_once(db_url):
    log = JobLog(connect(db_url))
    crashed = claim(log, "0", "run-crashed")
    alive = {"run-crashed": False}
    assert log.is_stale(log.get(crashed.job_id), is_run_dead=lambda rid: not alive[rid])
    taken = claim(log, "0", "run-new", is_run_dead=lambda rid: not alive.get(rid, True))
    assert taken.took_over and taken.attempt == 2
    with pytest.raises(RangeHeldError):
        claim(log, "0", "run-third", is_run_dead=lambda rid: rid == "run-crashed")


def test_success_rolls_back_with_the_callers_transaction(db_url):
    plane = connect(db_url)
    log = JobLog(plane)
    held = claim(log, "0", "run-a")
    with pytest.raises(RuntimeError):
        with plane.begin() as conn:
            log.mark_success(held.job_id, "100", conn=conn, run_id="run-a")
            step = StepRecord("write", "SUCCESS", 1.0, 2.0)
            log.record_step(held.job_id, held.attempt, step, conn=conn)
            raise RuntimeError("data commit failed")
    assert log.get(held.job_id).status == JobStatus.RUNNING
    assert log.steps(held.job_id) == []


def test_retry_keeps_the_steps_of_each_attempt(db_url):
    log = JobLog(connect(db_url))
    held = claim(log, "0", "run-a")
    log.record_step(held.job_id, 1, StepRecord("read", "FAILURE", 10.0, 12.5, error="timeout"))
    log.mark_failure(held.job_id, "timeout", run_id="run-a")
    retry = claim(log, "0", "run-b")
    log.record_step(retry.job_id, 2, StepRecord("read", "SUCCESS", 20.0, 21.0, source_count=5))
    log.mark_success(retry.job_id, "5", run_id="run-b")
    steps = log.steps(held.job_id)
    assert [(s.attempt, s.step_id, s.status, s.duration) for s in steps] == [
        (1, "read", "FAILURE", 2.5), (2, "read", "SUCCESS", 1.0)]
    assert log.step_counts([held.job_id]) == {held.job_id: {"FAILURE": 1, "SUCCESS": 1}}
    row = log.get(held.job_id)
    assert (row.status, row.attempt, row.error) == ("SUCCESS", 2, None)


def test_refresh_reclaims_a_successful_range(db_url):
    log = JobLog(connect(db_url))
    held = claim(log, "0", "run-a", runtime_args={"partition_key": "id:0-100"})
    log.mark_success(held.job_id, "100")
    again = claim(log, "0", "run-b", refresh=True, runtime_args={"refresh": True})
    assert (again.job_id, again.attempt, again.previous_status) == (held.job_id, 2, "SUCCESS")
    assert log.get(held.job_id).runtime_args_dict == {"refresh": True}
