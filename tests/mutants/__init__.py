"""Deliberately broken trainers: each one slip away from the reference, named after its flaw.

Every conformance check has at least one mutant here that the meta-tests (tests/test_mutants.py)
show it to fail. A mutant subclasses the reference and overrides as little as possible, and
declares next to its code, with ``@mutant_of`` (registry.py), each check it must fail and a
fragment of the evidence that check gives for its flaw.
"""
