"""The benchmark suite: `python -m tests.bench` (docs/performance.md).

Scripts that print figures, not tests: nothing here asserts anything about time, and pytest does
not collect this package (see conftest.py).
"""
