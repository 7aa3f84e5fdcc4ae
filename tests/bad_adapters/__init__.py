"""Deliberately broken adapters: the suite must survive each of them and say what broke.

Targets are named ``tests.bad_adapters.<module>:<factory>``; the worker processes import them
from the repository root (PYTHONPATH). tests/test_robustness.py runs the real CLI on each.
"""
