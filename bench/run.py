"""`make bench`: the engine scaling benchmark, then the versioned-table read benchmark.

Reports land in bench/out/ (JSON + PNG). BENCH_SCALE=0.1 gives a quick look.
"""

from __future__ import annotations

import sys

from bench import engine_scaling, versioned_reads


def main() -> None:
    engine_scaling.main()
    sys.argv = [sys.argv[0]]
    versioned_reads.main()


if __name__ == "__main__":
    main()
