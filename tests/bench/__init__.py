"""The benchmark suite: `python -m tests.bench` (see the README's Performance section).

Scripts that print figures, not tests: nothing here asserts anything about time, and pytest does
not collect this package (see conftest.py).
"""
