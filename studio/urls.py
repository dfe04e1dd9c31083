from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path

from studio import views as studio_views
from studio.health import healthz
from studio.throttle import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm

admin.site.login_form = ThrottledAdminAuthenticationForm  # sign-in throttling (studio.throttle)

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(authentication_form=ThrottledAuthenticationForm), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/limits/", include("limits.api_urls")),
    path("", studio_views.home, name="home"),
    path("studio/limits/", include("limits.urls")),
    path("studio/runs/<str:run_id>/", studio_views.run_detail, name="run-detail"),
    path("studio/runs/<str:run_id>/cancel/", studio_views.cancel_run, name="run-cancel"),
]
