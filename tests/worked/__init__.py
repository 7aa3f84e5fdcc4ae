"""Worked adapters for three trainers in the shapes of well-known public ones (the guide "The
adapter contract" walks through them; tests/test_worked_adapters.py checks each)."""
