"""Tests of the Python SDK: python3 -m unittest discover -s tests -t . (from sdk/python)."""
