"""Benchmarks (not timed tests): the copy workload writes its report and plot to
docs/bench/, the read benchmark to bench/out/."""
