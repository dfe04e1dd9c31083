# The benchmarks are scripts run with `python -m tests.bench`, never pytest tests.
collect_ignore_glob = ["*.py"]
