"""Adapters whose checkpoint files are described their own way."""
