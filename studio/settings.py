"""Settings for the box, read from the environment.

DATABASE_URL       default: an embedded SQLite file, var/stackbone.sqlite3
CELERY_BROKER_URL  default: an embedded broker (kombu's filesystem transport under var/broker)
SECRET_KEY         required when DEBUG is off
DEBUG              default: on (off in production)
ALLOWED_HOSTS      comma-separated; default: localhost names while DEBUG is on
STACKBONE_WORKSPACE the module that declares the limits; default: studio.workspace
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from kombu import Exchange, Queue

from limits.beat import BEAT_SCHEDULE, MAINTENANCE_TASKS
from stackbone.plumbing.embedded import TRANSPORT as EMBEDDED_TRANSPORT
from stackbone.plumbing.embedded import filesystem_broker, sqlite_options

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("STACKBONE_VAR_DIR", BASE_DIR / "var"))

# A test run shares no state with a box on the same machine (README "Two commands"). In the pytest
# process (pytest-django imports these settings) every file lives in a fresh temporary folder,
# whatever STACKBONE_VAR_DIR says: the SQLite databases, the embedded broker's folder, the beat
# schedule, the static root. STACKBONE_TEST_RUN names the run; the processes the tests start
# (workers, the CLI) inherit it and the folder, so they share the run's state and no other.
if "pytest_django" in sys.modules:
    VAR_DIR = Path(tempfile.mkdtemp(prefix="stackbone-test-"))
    os.environ["STACKBONE_VAR_DIR"] = str(VAR_DIR)
    os.environ["STACKBONE_TEST_RUN"] = uuid.uuid4().hex[:12]
    # An empty static root: tests serve no collected files, and WhiteNoise warns on a missing one.
    (VAR_DIR / "staticfiles").mkdir()
STACKBONE_TEST_RUN = os.environ.get("STACKBONE_TEST_RUN", "")
# Whose clock the box keeps (stackbone/plumbing/clock.py): "database", the only production value.
# The pytest process takes "process" so time_machine moves the box's time on PostgreSQL too; the
# workers and commands the tests start are production processes and keep the database's.
STACKBONE_CLOCK = "process" if "pytest_django" in sys.modules else "database"


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {value!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", True)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"  # noqa: S105
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

if not DEBUG:
    # Production sits behind TLS (a proxy that sets X-Forwarded-Proto).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Health probes (a load balancer, Kubernetes) call /healthz over plain HTTP and need its
    # 200/503, not a redirect to HTTPS.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", str(60 * 60 * 24 * 365)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    # Preloading is hard to undo (browsers ship the list) and binds every subdomain: opt in.
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        SILENCED_SYSTEM_CHECKS = ["security.W021"]  # "not preloaded": a choice, not an oversight

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "limits",
    "stackbone",
    "studio",  # the box's own checks and Celery app (label "box"); the runs' app is stackbone
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "stackbone.plumbing.middleware.RejectNulCharactersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "studio.urls"
WSGI_APPLICATION = "studio.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "stackbone.plumbing.clock.skew_banner",
            ],
        },
    },
]

VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{VAR_DIR / 'stackbone.sqlite3'}", conn_max_age=600, conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default's options (stackbone/plumbing/embedded.py: WAL, IMMEDIATE, a 30 s wait
    # for the write lock, a connection per request or task), as docs/embedding.md gives them.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = sqlite_options()
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/studio/limits/"
# Django's password-reset pages, off by default: they need mail the box does not configure
# (docs/security.md).
STACKBONE_PASSWORD_RESET = env_bool("STACKBONE_PASSWORD_RESET", False)

# --- Security (docs/security.md) ---------------------------------------------------------------
# Content-Security-Policy on every response, in development too, so tests and browsers see what
# production sends: only our own scripts, styles and images; no inline script or style, no eval
# (htmx runs with allowEval off), no framing, forms post only to us.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
# Sign-in throttling (stackbone.plumbing.throttle): this many failed attempts for one username (or from one
# address) within the window lock that username (or address) out until failures age out of it.
STACKBONE_LOGIN_MAX_FAILURES = int(os.environ.get("STACKBONE_LOGIN_MAX_FAILURES", "5"))
STACKBONE_LOGIN_WINDOW_SECONDS = int(os.environ.get("STACKBONE_LOGIN_WINDOW_SECONDS", str(15 * 60)))
STACKBONE_LOGIN_MAX_FAILURES_PER_ADDRESS = int(
    os.environ.get("STACKBONE_LOGIN_MAX_FAILURES_PER_ADDRESS", str(4 * STACKBONE_LOGIN_MAX_FAILURES))
)  # 0 turns the per-address limit off (behind a proxy every client has the proxy's address)

# --- Celery ---------------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    # The embedded broker (stackbone/plumbing/embedded.py): kombu's filesystem transport, made
    # safe for several processes, in var/broker.
    CELERY_BROKER_TRANSPORT = EMBEDDED_TRANSPORT
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker(VAR_DIR / "broker")
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://", "redis+socket://")):
    # kombu's Redis channel rotates its queues round robin by default; this reads them in a fixed
    # order, the maintenance queue first (stackbone/plumbing/broker.py).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"queue_order_strategy": "stackbone.plumbing.broker:MaintenanceFirst"}
# Two queues (docs/operations.md, "Queues"). The sweep and run recovery (beat's two tasks, and the
# recovery each worker sends at start) go to the maintenance queue; every other task, the runs',
# to Celery's default queue. A worker consumes both unless -Q says otherwise, and takes from the
# maintenance queue first whenever it takes a message (stackbone/plumbing/broker.py: on the
# filesystem broker and on Redis), so however many runs are queued the sweep waits for at most
# the tasks the worker already holds. A test run's queues have names of its own (STACKBONE_TEST_RUN).
CELERY_TASK_DEFAULT_QUEUE = f"stackbone-test-{STACKBONE_TEST_RUN}" if STACKBONE_TEST_RUN else "celery"
STACKBONE_MAINTENANCE_QUEUE = (
    f"stackbone-test-{STACKBONE_TEST_RUN}-maintenance" if STACKBONE_TEST_RUN else "stackbone-maintenance"
)
CELERY_TASK_QUEUES = [
    Queue(name, Exchange(name), routing_key=name) for name in (STACKBONE_MAINTENANCE_QUEUE, CELERY_TASK_DEFAULT_QUEUE)
]
CELERY_TASK_ROUTES = {name: {"queue": STACKBONE_MAINTENANCE_QUEUE} for name in MAINTENANCE_TASKS}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker keeps its database connection between tasks, as the web server does between requests
# (studio/celery.py: Celery's fixup would otherwise close it after every task); the fixup's own
# recycling then happens every 10,000 tasks (it counts before and after each task).
CELERY_DB_REUSE_MAX = 10_000
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_TASK_EAGER_PROPAGATES = True
# The sweep and run recovery every 15 s (limits/beat.py says why no `expires`).
CELERY_BEAT_SCHEDULE = {**BEAT_SCHEDULE}

# --- Stackbone ------------------------------------------------------------------------------------
STACKBONE_WORKSPACE = os.environ.get("STACKBONE_WORKSPACE", "studio.workspace")
STACKBONE_WORKFLOWS = env_list("STACKBONE_WORKFLOWS", ["studio.workflows"])
# How long freed slots and finished queue entries are kept as history (the sweep deletes older
# ones in bounded batches): a duration like "7d" or "12h".
STACKBONE_HISTORY_RETENTION = os.environ.get("STACKBONE_HISTORY_RETENTION", "7d")
# The bearer token Prometheus sends to /metrics (docs/insights.md); unset: /metrics answers 404
# (outside DEBUG).
STACKBONE_METRICS_TOKEN = os.environ.get("STACKBONE_METRICS_TOKEN", "")

# Server errors (django.request, level ERROR: 5xx with their traceback) reach stderr with DEBUG off
# too: Django's default sends them to its console only with DEBUG on, otherwise to mail_admins
# alone, so a 500 left no line anywhere. `server_errors` takes over when DEBUG is off (no line
# twice); 404s are warnings, below its level.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"require_debug_false": {"()": "django.utils.log.RequireDebugFalse"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler"},
        "server_errors": {"class": "logging.StreamHandler", "level": "ERROR", "filters": ["require_debug_false"]},
    },
    "loggers": {
        "limits": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
        "studio": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
        "django.request": {"handlers": ["server_errors"]},
    },
}

# --- Test runs (see STACKBONE_TEST_RUN above) ------------------------------------------------------
# On a broker server (Redis) a test run and its workers use queues (named in the Celery section)
# and a key prefix of their own (queues, unacked messages, control and pub/sub channels), so they
# never consume a box's messages and a box never consumes theirs, even with the same
# CELERY_BROKER_URL.
if STACKBONE_TEST_RUN and CELERY_BROKER_URL.startswith(("redis://", "rediss://", "redis+socket://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **globals().get("CELERY_BROKER_TRANSPORT_OPTIONS", {}),
        "global_keyprefix": f"stackbone-test-{STACKBONE_TEST_RUN}:",
    }
