"""`offset-assets offsets`, `rescan` (alias `reset`), `reprocess` and `metrics` as a shell
user sees them. What the next run processes after each verb: `test_cli_reprocess.py`."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from offset_assets.cli import main
from offset_assets.cli.offsets import human_age, iso_utc
from offset_assets.control_plane import connect
from offset_assets.control_plane.offsets import OffsetRepository


@pytest.fixture
def offsets(db_url) -> OffsetRepository:
    return OffsetRepository(connect(db_url))


def run(url: str, *args: str, input: str | None = None):
    return CliRunner().invoke(main, ["--db-url", url, *args], input=input)


def write_with_age(repo: OffsetRepository, offsets: dict, age_seconds: float) -> None:
    repo.update_offsets_bulk(offsets)
    with repo.plane.begin() as conn:
        for (transformation, input_name) in offsets:
            conn.execute(
                sa.text(
                    "UPDATE transform_input_offset SET updated_at = :at "
                    "WHERE transformation_id = :t AND input_table_name = :i"
                ),
                {"at": time.time() - age_seconds, "t": transformation, "i": input_name},
            )


def unreachable_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://u:s3cret@127.0.0.1:{port}/db"


# --- formatting -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (-3.0, "0s"), (59.9, "59s"), (192, "3m12s"), (3600, "1h00m"),
     (7530, "2h05m"), (86400 + 3 * 3600 + 59, "1d03h")],
)
def test_ages_are_shown_in_the_two_largest_units(seconds, shown):
    assert human_age(seconds) == shown


def test_offsets_are_shown_as_iso_utc_with_microseconds():
    assert iso_utc(1702345678.123456) == "2023-12-12T01:47:58.123456Z"
    assert iso_utc(1e300) == "out of range"


# --- offsets ----------------------------------------------------------------------------


def test_offsets_on_a_control_plane_without_offsets_says_so(offsets, db_url):
    # `offsets` created the control plane, as a pipeline's first run does; the CLI never does.
    result = run(db_url, "offsets")
    assert result.exit_code == 0
    assert result.output == "no offsets\n"


def test_offsets_lists_every_offset_with_iso_time_and_age(offsets, db_url):
    write_with_age(offsets, {("process_posts", "posts"): 1702345678.123,
                             ("process_posts", "profiles"): 1702345600.5}, 7530)
    write_with_age(offsets, {("enrich", "posts"): 5.0}, 86400 + 3 * 3600 + 100)

    result = run(db_url, "offsets")

    assert result.exit_code == 0, result.output
    assert result.output == (
        "TRANSFORMATION  INPUT     OFFSET          OFFSET (UTC)                 AGE\n"
        "enrich          posts     5.0             1970-01-01T00:00:05.000000Z  1d03h\n"
        "process_posts   posts     1702345678.123  2023-12-12T01:47:58.123000Z  2h05m\n"
        "process_posts   profiles  1702345600.5    2023-12-12T01:46:40.500000Z  2h05m\n"
    )


def test_offsets_of_one_transformation_lists_only_its_inputs(offsets, db_url):
    write_with_age(offsets, {("process_posts", "posts"): 10.0, ("enrich", "posts"): 5.0}, 7530)

    result = run(db_url, "offsets", "enrich")

    assert result.exit_code == 0
    assert result.output.splitlines()[1:] == [
        "enrich          posts  5.0     1970-01-01T00:00:05.000000Z  2h05m"
    ]


# --- rescan (alias reset) -------------------------------------------------------------


def test_rescan_of_one_input_with_yes_resets_it_and_says_what_the_next_run_does(offsets, db_url):
    offsets.update_offsets_bulk({("t", "posts"): 1702345678.123, ("t", "profiles"): 20.0})

    result = run(db_url, "rescan", "t", "--input", "posts", "--yes")

    assert result.exit_code == 0, result.output
    assert result.output == (
        "reset t / posts (was 2023-12-12T01:47:58.123000Z)\n"
        "1 offset(s) reset. The next run re-scans these inputs' whole history and processes the "
        "keys whose meta is older than their versions (changes not processed yet); keys already "
        "processed stay as they are. To process every key again: offset-assets reprocess t\n"
    )
    assert offsets.get_offsets_for_transformation("t") == {"profiles": 20.0}


@pytest.mark.parametrize("verb", ["rescan", "reset"])
def test_rescan_of_a_transformation_asks_first_showing_offsets_as_dates(offsets, db_url, verb):
    offsets.update_offsets_bulk({("t", "a"): 1.0, ("t", "b"): 2.0, ("u", "a"): 3.0})

    result = run(db_url, verb, "t", input="y\n")

    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "  a: 1970-01-01T00:00:01.000000Z\n"
        "  b: 1970-01-01T00:00:02.000000Z\n"
        "Reset 2 offset(s) of transformation 't'? [y/N]: y\n"
        "reset t / a (was 1970-01-01T00:00:01.000000Z)\n"
        "reset t / b (was 1970-01-01T00:00:02.000000Z)\n"
        "2 offset(s) reset."
    )
    assert offsets.get_offsets_for_transformation("t") == {}
    assert offsets.get_offset("u", "a") == 3.0


def test_reset_help_says_it_is_rescan_and_does_not_reprocess_processed_keys():
    help_text = " ".join(CliRunner().invoke(main, ["reset", "--help"]).output.split())
    assert "former name of `rescan`" in help_text
    assert "Keys already processed at their current version are not processed" in help_text


def test_rescan_declined_at_the_prompt_keeps_the_offsets(offsets, db_url):
    offsets.update_offsets_bulk({("t", "a"): 1.0})

    result = run(db_url, "rescan", "t", input="n\n")

    assert result.exit_code == 1
    assert "Aborted!" in result.output
    assert offsets.get_offset("t", "a") == 1.0


def test_an_unknown_name_exits_1_listing_the_known_transformations_and_inputs(offsets, db_url):
    offsets.update_offsets_bulk({("t", "a"): 1.0, ("u", "b"): 2.0})

    missing_input = run(db_url, "rescan", "t", "--input", "missing", "--yes")
    assert (missing_input.exit_code, missing_input.stderr) == (
        1, "error: no offset to reset for transformation 't', input 'missing' (inputs with offsets: a)\n")
    for args in (["rescan", "nope", "--yes"], ["reprocess", "nope", "--yes"], ["offsets", "nope"]):
        typo = run(db_url, *args)
        assert (typo.exit_code, typo.stderr) == (
            1, "error: no transformation 'nope' in the control plane (transformations: t, u)\n"), args
    assert offsets.get_offset("t", "a") == 1.0


# --- metrics ----------------------------------------------------------------------------


def test_metrics_exposes_offset_age_and_value_per_input_in_prometheus_format(offsets, db_url):
    write_with_age(offsets, {("process_posts", "posts"): 1702345678.123}, 3600)
    write_with_age(offsets, {("enrich", "posts"): 5.0}, 60)

    result = run(db_url, "metrics")

    assert result.exit_code == 0, result.output
    families = {f.name: f for f in text_string_to_metric_families(result.output)}
    assert families["offset_assets_offset_age_seconds"].type == "gauge"
    assert families["offset_assets_offset_value"].type == "gauge"

    def samples(name: str) -> dict[tuple[str, str], float]:
        return {
            (s.labels["transformation_id"], s.labels["input_table_name"]): s.value
            for s in families[name].samples
        }

    assert samples("offset_assets_offset_value") == {
        ("process_posts", "posts"): 1702345678.123,
        ("enrich", "posts"): 5.0,
    }
    ages = samples("offset_assets_offset_age_seconds")
    assert ages.keys() == {("process_posts", "posts"), ("enrich", "posts")}
    assert ages[("process_posts", "posts")] == pytest.approx(3600, abs=30)
    assert ages[("enrich", "posts")] == pytest.approx(60, abs=30)


def test_metrics_on_a_control_plane_without_offsets_declares_the_metrics_without_samples(offsets, db_url):
    result = run(db_url, "metrics")
    assert result.exit_code == 0
    families = {f.name: f.samples for f in text_string_to_metric_families(result.output)}
    assert families == {"offset_assets_offset_age_seconds": [], "offset_assets_offset_value": []}


# --- faults -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["offsets"], ["reset", "t", "--yes"], ["metrics"]])
def test_an_unreachable_database_is_one_line_with_the_password_masked_and_exit_1(command):
    url = unreachable_url()

    result = run(url, *command)

    assert result.exit_code == 1
    masked = url.replace("s3cret", "***")
    assert result.stderr.startswith(f"error: cannot reach control-plane database {masked}: ")
    assert result.stderr.count("\n") == 1
    assert "s3cret" not in result.output
    assert result.stdout == ""


def test_a_malformed_url_is_one_line_and_exit_1():
    result = run("not a url", "offsets")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: malformed control-plane URL 'not a url'")
    assert result.stderr.count("\n") == 1


def test_the_console_script_reports_an_unreachable_database_without_traceback(tmp_path):
    script = Path(sys.executable).parent / "offset-assets"
    url = unreachable_url()

    done = subprocess.run(
        [str(script), "metrics"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"OFFSET_ASSETS_DB_URL": url, "PATH": "/usr/bin:/bin"},
        timeout=120,
    )

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"error: cannot reach control-plane database {url.replace('s3cret', '***')}: "
    )
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr


def test_the_database_url_comes_from_the_environment(offsets, db_url):
    offsets.update_offsets_bulk({("t", "a"): 1.0})
    result = CliRunner().invoke(main, ["offsets", "t"], env={"OFFSET_ASSETS_DB_URL": db_url})
    assert result.exit_code == 0
    assert result.output.splitlines()[1].startswith("t               a      1.0")
