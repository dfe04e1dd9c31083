"""The box: a Django project (settings, urls, the dev command, the demo, the example workflows)
built from the installable apps `limits` and `stackbone` like any other project (docs/embedding.md).

No Celery app is made on import here, unlike the usual project package: old imports of moved
modules (studio.runs.*, studio.plumbing.*) reach this package from other projects too. The box
loads its app (studio/celery.py) in BoxConfig.ready(), and `celery -A studio` finds it."""
