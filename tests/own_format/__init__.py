"""Trainers whose checkpoint format is their own, in the shapes the issue "judge the trainer,
not the suite's reading of its files" met: checked by tests/test_own_format.py."""
