from django.conf import settings
from django.contrib import admin
from django.contrib.auth import urls as auth_urls
from django.contrib.auth import views as auth_views
from django.contrib.auth.views import LoginView
from django.http import FileResponse, HttpRequest
from django.urls import URLPattern, include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe
from django.views.generic import RedirectView

from limits.metrics import metrics
from studio import runs_screen
from studio import views as studio_views
from studio.health import healthz
from studio.plumbing.throttle import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm

admin.site.login_form = ThrottledAdminAuthenticationForm  # sign-in throttling (studio.plumbing.throttle)


@require_safe
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> FileResponse:
    """Browsers ask for /favicon.ico on every page: answer it instead of logging a 404."""
    return FileResponse((settings.BASE_DIR / "static" / "favicon.ico").open("rb"), content_type="image/x-icon")


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(authentication_form=ThrottledAuthenticationForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("api/limits/", include("limits.api_urls")),
    path("api/runs/", include("studio.runs_api_urls")),
    path("favicon.ico", favicon, name="favicon"),
    # GET and HEAD (uptime checks, link previews) both redirect to the Limits screen.
    path("", require_safe(RedirectView.as_view(pattern_name="limits:list")), name="home"),
    path("studio/limits/", include("limits.urls")),
    path("studio/runs/", runs_screen.run_list_view, name="runs"),
    # Under "-/": a run id is any text up to 64 characters (new_run_id makes "run_...", but nothing
    # stops a row with another id), and /studio/runs/start/ would hide a run whose id is "start".
    # "<run_id>/" never takes a slash, so "-/start/" cannot be a run's page.
    path("studio/runs/-/start/", runs_screen.start_run, name="runs-start"),
    path("studio/runs/-/cancel/", runs_screen.cancel_run, name="runs-cancel"),
    path("studio/runs/<str:run_id>/", studio_views.run_detail, name="run-detail"),
    path("studio/runs/<str:run_id>/cancel/", studio_views.cancel_run, name="run-cancel"),
]

if settings.STACKBONE_PASSWORD_RESET:
    # Off by default (docs/security.md): reset needs working mail, which the box does not set up.
    # Without these URLs the admin's sign-in page shows no "Forgotten your password?" link either.
    password_reset = [
        url
        for url in auth_urls.urlpatterns
        if isinstance(url, URLPattern) and str(url.name).startswith("password_reset")
    ]
    urlpatterns += [path("accounts/", include(password_reset))]
