"""Benchmarks of trainspec: suite wall time and where it goes, multi-rank cost, the matrix,
trainer overhead (with Lightning and HF Trainer as anchors), checkpoint cost.

Not tests: each benchmark measures one arm against a baseline in the same process and the same
run, the arms interleaved so that load from other processes falls on both, and reports the
ratio with its spread over repeats. ``python -m benchmarks`` runs them all and writes
``docs/benchmarks.md`` (``--quick`` for a run of a few minutes without the matrix).
"""
