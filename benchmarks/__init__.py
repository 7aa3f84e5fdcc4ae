"""Benchmarks of trainspec: suite wall time, multi-rank cost, trainer overhead, checkpoint cost.

Not tests: each benchmark measures one arm against a baseline in the same process and the same
run, the arms interleaved so that load from other processes falls on both, and reports the
ratio with its spread over repeats. ``python -m benchmarks`` runs them all and writes
``docs/benchmarks.md``.
"""
