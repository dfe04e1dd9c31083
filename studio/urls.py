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
from stackbone.plumbing.throttle import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm
from studio.health import healthz

admin.site.login_form = ThrottledAdminAuthenticationForm  # sign-in throttling (stackbone.plumbing.throttle)


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
    path("api/runs/", include("limits.runs.api_urls")),
    path("favicon.ico", favicon, name="favicon"),
    # GET and HEAD (uptime checks, link previews) both redirect to the Limits screen.
    path("", require_safe(RedirectView.as_view(pattern_name="limits:list")), name="home"),
    path("studio/", include("limits.studio_urls")),
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
