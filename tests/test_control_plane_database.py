import sqlalchemy as sa

from offset_assets.control_plane import connect


def test_fresh_database_is_brought_to_head(db_url):
    plane = connect(db_url)
    tables = set(sa.inspect(plane.engine).get_table_names())
    assert {"transform_input_offset", "table_delta", "commit_clock", "run_lease"} <= tables
    with plane.begin() as conn:
        assert conn.execute(sa.text("SELECT last_commit_ts FROM commit_clock")).scalar_one() == 0
