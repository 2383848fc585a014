"""A script that exits when imported."""
import sys

sys.exit(5)


def make():
    pass
