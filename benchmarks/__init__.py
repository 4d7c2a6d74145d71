"""Benchmarks: each prints its figures as ratios against a floor measured in the same run."""
