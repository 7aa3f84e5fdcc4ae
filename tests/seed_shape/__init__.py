"""Base classes in the seed's shape, for the end-to-end tests of the ``--base-trainer`` path.

``correct`` is the seed's BaseTrainer rewritten to meet every clause, independently of the
reference trainer: the suite must pass it (no false alarm). ``seed`` is a faithful port of the
seed itself, weak points included: the suite must fail exactly the clauses those weak points
violate (tests/test_seed_shape.py).
"""
