"""The benchmarks' own tests: the pieces that decide what their numbers mean."""
