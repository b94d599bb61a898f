"""`offset-assets jobs` as a shell user sees it."""

import json

from click.testing import CliRunner

from offset_assets.cli import main
from offset_assets.control_plane import connect
from offset_assets.control_plane.job_log import JobLog
from offset_assets.control_plane.job_log.records import StepRecord


def run(url, *args):
    return CliRunner().invoke(main, ["--db-url", url, *args])


def story(url):
    log = JobLog(connect(url))
    first = log.claim("orders", "0", None, run_id="run-1", log_driven_type="auto_inc_id")
    log.record_step(first.job_id, 1, StepRecord("read", "SUCCESS", 100.0, 101.0, source_count=5))
    log.record_step(first.job_id, 1, StepRecord("write", "SUCCESS", 101.0, 103.0, target_count=5))
    log.mark_success(first.job_id, "5")
    second = log.claim("orders", "5", None, run_id="run-2", log_driven_type="auto_inc_id")
    log.record_step(second.job_id, 1, StepRecord("read", "FAILURE", 200.0, 201.0, error="boom"))
    log.mark_failure(second.job_id, "ConnectionError: source went away")
    log.claim("daily", "20220101000000", "20220102000000", run_id="run-3",
              log_driven_type="timewindow", period=1440)
    return first.job_id, second.job_id


def test_jobs_lists_ranges_newest_first_with_step_counts(sqlite_url):
    first, second = story(sqlite_url)
    result = run(sqlite_url, "jobs", "orders")
    assert result.exit_code == 0, result.output
    header, newest, oldest, _, progress = result.output.splitlines()
    assert header.split()[:3] == ["job_id", "job", "type"]
    assert newest.split()[:7] == [str(second), "orders", "auto_inc_id", "5", "-", "FAILURE", "1"]
    assert "1 failure" in newest and "ConnectionError: source went away" in newest
    assert oldest.split()[:7] == [str(first), "orders", "auto_inc_id", "0", "5", "SUCCESS", "1"]
    assert "2 success" in oldest and "run-1" in oldest
    assert progress == "orders: 1 range done, 1 failed, 0 running; ids ingested up to 5"


def test_jobs_without_a_name_lists_every_job_and_filters_by_status(sqlite_url):
    story(sqlite_url)
    everything = run(sqlite_url, "jobs")
    assert len(everything.output.splitlines()) == 4 and "daily" in everything.output
    running = run(sqlite_url, "jobs", "--status", "running")
    assert [line.split()[1] for line in running.output.splitlines()[1:]] == ["daily"]
    limited = run(sqlite_url, "jobs", "-n", "1", "--json")
    (row,) = [json.loads(line) for line in limited.output.splitlines()]
    assert (row["job_name"], row["period"], row["steps"]) == ("daily", 1440, {})


def test_jobs_json_carries_step_counts(sqlite_url):
    story(sqlite_url)
    rows = [json.loads(line) for line in run(sqlite_url, "jobs", "orders", "--json").output.splitlines()]
    assert [r["steps"] for r in rows] == [{"FAILURE": 1}, {"SUCCESS": 2}]


def test_jobs_of_an_unknown_job_is_one_clear_line(sqlite_url):
    story(sqlite_url)
    result = run(sqlite_url, "jobs", "ordres")
    assert result.exit_code == 1
    assert result.output.strip() == "error: no job_log rows for job 'ordres' (jobs: daily, orders)"
    empty = run(sqlite_url, "jobs", "orders", "--status", "RUNNING")
    assert (empty.exit_code, empty.output.strip()) == (0, "no job_log rows with status RUNNING")


def test_time_window_ranges_are_shown_as_utc_dates_and_ids_as_stored(sqlite_url):
    story(sqlite_url)
    daily = run(sqlite_url, "jobs", "daily").output.splitlines()[1].split()
    assert daily[3:5] == ["2022-01-01T00:00:00Z", "2022-01-02T00:00:00Z"]
    as_json = json.loads(run(sqlite_url, "jobs", "daily", "--json").output)
    assert as_json["data_range_start"] == "20220101000000"  # --json keeps the stored value


def test_jobs_of_one_job_ends_with_its_backlogs_progress(sqlite_url):
    """A backlog of ids (0, 12] in ranges of 3, planned as the source grew from 10 to 12 ids:
    two ranges done, the third failed, and the plan that claimed it still had two due."""
    log = JobLog(connect(sqlite_url), clock=iter([100.0, 101.0, 200.0, 201.0, 300.0, 301.0]).__next__)
    for start, end, backlog_end, due in [("0", "3", "10", 4), ("3", "6", "10", 3),
                                         ("6", "9", "12", 2)]:
        claim = log.claim("users", start, end, run_id="run", log_driven_type="auto_inc_id",
                          runtime_args={"backlog_end": backlog_end, "backlog_ranges": due,
                                        "refresh": False})
        if start == "6":
            log.mark_failure(claim.job_id, "ConnectionError: source went away")
        else:
            log.mark_success(claim.job_id, end)
    result = run(sqlite_url, "jobs", "users")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "users: 2 ranges done, 1 failed, 0 running; ids ingested up to 6 of 12; "
        "2 ranges due (planned at 1970-01-01T00:05:00.000000Z)")
    # Listing every job, or as JSON, shows ranges only.
    assert "ranges done" not in run(sqlite_url, "jobs").output
    assert "ranges done" not in run(sqlite_url, "jobs", "users", "--json").output


def test_the_progress_of_time_windows_is_shown_in_utc(sqlite_url):
    log = JobLog(connect(sqlite_url))
    claim = log.claim("daily", "20220101000000", "20220102000000", run_id="run",
                      log_driven_type="timewindow", period=1440,
                      runtime_args={"backlog_end": "20220105000000", "backlog_ranges": 4})
    log.mark_success(claim.job_id, "20220102000000")
    progress = run(sqlite_url, "jobs", "daily").output.splitlines()[-1]
    assert progress.startswith(
        "daily: 1 range done, 0 failed, 0 running; windows ingested up to 2022-01-02T00:00:00Z "
        "of 2022-01-05T00:00:00Z; 3 ranges due (planned at ")


def test_a_window_ingested_before_it_closed_shows_an_open_end_not_an_empty_range(sqlite_url):
    log = JobLog(connect(sqlite_url))
    today = log.claim("daily", "20220102000000", "20220103000000", run_id="run-1",
                      log_driven_type="timewindow", period=1440, runtime_args={"open_window": True})
    log.mark_success(today.job_id, "20220102000000")  # end = start: the window stays due
    closed = log.claim("daily", "20220101000000", "20220102000000", run_id="run-2",
                       log_driven_type="timewindow", period=1440, refresh=True)
    log.mark_success(closed.job_id, "20220102000000")

    header, *lines, _, progress = run(sqlite_url, "jobs", "daily").output.splitlines()
    rows = {line.split()[0]: line.split() for line in lines}
    assert rows[str(today.job_id)][3:6] == ["2022-01-02T00:00:00Z", "open", "SUCCESS"]
    assert rows[str(closed.job_id)][3:6] == ["2022-01-01T00:00:00Z", "2022-01-02T00:00:00Z", "SUCCESS"]
    assert progress == "daily: 2 ranges done, 0 failed, 0 running; windows ingested up to 2022-01-02T00:00:00Z"
