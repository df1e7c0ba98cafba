"""Foundations every layer uses: typed errors, dtypes, paths, statistics, threads."""
