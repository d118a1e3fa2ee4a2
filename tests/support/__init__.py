"""Test support code importable from every test folder (``pythonpath = ["tests"]``)."""
