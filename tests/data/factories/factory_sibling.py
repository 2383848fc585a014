"""Imported by user_code.py:sibling from beside it (not a factory)."""
WIDTH = 6
