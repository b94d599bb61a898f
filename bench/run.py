"""`make bench`: the datapipe copy workload (up to 10M rows and a long series of
incremental runs), then the versioned-table read benchmark.

Reports land in docs/bench/ (copy workload: JSON + PNG) and bench/out/ (reads); the
environment knobs of each are in its module docstring.
"""

from __future__ import annotations

import sys

from bench import copy_workload, versioned_reads


def main() -> None:
    copy_workload.main()
    sys.argv = [sys.argv[0]]
    versioned_reads.main()


if __name__ == "__main__":
    main()
