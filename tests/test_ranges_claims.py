import time

import pytest

from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.errors import RangeDoneError
from offset_assets.ranges.claims import ClaimPolicy, Heartbeat, claim_range
from offset_assets.ranges.errors import RangeOrderError
from offset_assets.ranges.planners import DataRange, RangeKind


def id_range(start, end=None, refresh=False):
    return DataRange(RangeKind.AUTO_INC_ID, start, end, refresh=refresh)


def test_claim_range_claims_only_the_next_range_unless_refreshing(sqlite_url):
    log = JobLog(connect(sqlite_url))
    pending = [id_range("0", "10")]
    with pytest.raises(RangeOrderError, match="not the next range"):
        claim_range(log, "orders", id_range("10", "20"), pending, run_id="r1")
    claim = claim_range(log, "orders", id_range("0", "10"), pending, run_id="r1",
                        policy=ClaimPolicy(), runtime_args={"partition_key": "id:0-10"})
    assert log.get(claim.job_id).log_driven_type == "auto_inc_id"
    log.mark_success(claim.job_id, "10")
    with pytest.raises(RangeDoneError):
        claim_range(log, "orders", id_range("0", "10"), [id_range("0", "10")], run_id="r2")
    again = claim_range(log, "orders", id_range("0", "10", refresh=True), [], run_id="r2")
    assert again.attempt == 2


def test_heartbeat_keeps_the_claim_alive_and_notices_a_takeover(sqlite_url):
    log = JobLog(connect(sqlite_url))
    claim = log.claim("orders", "0", None, run_id="holder")
    before = log.get(claim.job_id).heartbeat_at
    with Heartbeat(log, claim, interval_s=0.05) as beat:
        time.sleep(0.3)
        assert log.get(claim.job_id).heartbeat_at > before and not beat.lost
        log.claim("orders", "0", None, run_id="rescuer", is_run_dead=lambda r: r == "holder")
        deadline = time.time() + 5
        while not beat.lost and time.time() < deadline:
            time.sleep(0.05)
    assert beat.lost and beat.error is None
