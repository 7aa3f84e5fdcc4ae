"""The worked examples of the docs' guides, run by tests/test_docs.py."""
