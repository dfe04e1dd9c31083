"""Workers whose clock is off (the clock-skew finding): the skew injector (sitecustomize.py) and
the tests that run real workers 10 minutes ahead of and behind the database's clock."""
