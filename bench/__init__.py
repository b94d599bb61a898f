"""Benchmarks (not timed tests): each module writes a JSON report under bench/out/."""
