from django.contrib import admin
from django.urls import include, path

from studio import views as studio_views
from studio.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/limits/", include("limits.api_urls")),
    path("", studio_views.home, name="home"),
    path("studio/limits/", include("limits.urls")),
    path("studio/runs/<str:run_id>/", studio_views.run_detail, name="run-detail"),
    path("studio/runs/<str:run_id>/cancel/", studio_views.cancel_run, name="run-cancel"),
]
