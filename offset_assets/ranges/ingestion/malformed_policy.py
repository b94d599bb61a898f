"""The malformed-value policy of a range: what becomes of the records whose values do not
fit their declared types (`IngestionJob.on_malformed`). FAIL fails the range naming the
first such record; QUARANTINE sets them aside for the job's quarantine table, unless more
than `max_malformed_share` of a range of `MALFORMED_SHARE_MIN_RECORDS` records or more do
not fit: then the declaration is more likely wrong than the records, and the range fails.
The sources mark such records (`sources/batch.py`'s `MALFORMED`); this decides."""

from __future__ import annotations

from pyspark.sql import DataFrame

from offset_assets.ranges.errors import MalformedValueError
from offset_assets.ranges.ingestion.job import MALFORMED_SHARE_MIN_RECORDS, IngestionJob, OnMalformed
from offset_assets.ranges.sources.batch import MALFORMED, SourceBatch


def split_malformed(job: IngestionJob, batch: SourceBatch) -> tuple[DataFrame, DataFrame | None]:
    """The range's records whose values fit, and those that do not (`MALFORMED`'s
    fields) when the job quarantines them. A job that does not fails here, naming the
    first such record (by source key), and so does one that quarantines when too many
    do not fit (`malformed_share_exceeded`); a range without any costs no Spark job."""
    if batch.malformed is None:
        return batch.df, None
    records = batch.df.drop(MALFORMED)
    if not batch.malformed:
        return records, None
    marked = batch.df.where(f"{MALFORMED} IS NOT NULL")

    def first() -> str:
        (reason,) = marked.selectExpr(f"min_by({MALFORMED}.reason, {MALFORMED}.source_key)").first()
        return reason

    if job.on_malformed == OnMalformed.FAIL:
        raise MalformedValueError(
            f"{first()} ({batch.malformed} malformed record(s) in the range; on_malformed='quarantine' "
            f"would set them aside in {job.quarantine_name!r})")
    total = batch.row_count if batch.row_count is not None else batch.df.count()
    if malformed_share_exceeded(job, batch.malformed, total):
        raise MalformedValueError(
            f"{batch.malformed} of {total} record(s) of the range do not fit their declared types "
            f"({batch.malformed / total:.0%}, more than max_malformed_share {job.max_malformed_share:g}), so "
            f"the declaration is more likely wrong than the records; the first: {first()}. Nothing is set aside "
            "or committed, and the range is retried as it is: fix the declared type (or the source), or raise "
            "max_malformed_share to quarantine them")
    return batch.df.where(f"{MALFORMED} IS NULL").drop(MALFORMED), marked.select(f"{MALFORMED}.*")


def malformed_share_exceeded(job: IngestionJob, malformed: int, total: int) -> bool:
    """Whether a range of `total` records, `malformed` of which do not fit, holds too many
    to set them aside: at least `MALFORMED_SHARE_MIN_RECORDS` records, more than the job's
    `max_malformed_share` of them malformed."""
    limit = job.max_malformed_share
    return limit is not None and total >= MALFORMED_SHARE_MIN_RECORDS and malformed > limit * total
