"""The Limits changelist's filters: overridden, declared, paused."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from limits.models import Limit


class OverriddenFilter(admin.SimpleListFilter):
    title = "overridden"
    parameter_name = "overridden"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [
            ("any", "Capacity, max hold or per key"),
            ("capacity", "Capacity"),
            ("max_hold", "Max hold"),
            ("per_key", "Per key"),
            ("none", "None (declared values)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Limit]) -> QuerySet[Limit]:
        capacity, max_hold = Q(capacity_override__isnull=False), Q(max_hold_override_ms__isnull=False)
        per_key = Q(per_key_override__isnull=False)
        match self.value():
            case "any":
                return queryset.filter(capacity | max_hold | per_key)
            case "capacity":
                return queryset.filter(capacity)
            case "max_hold":
                return queryset.filter(max_hold)
            case "per_key":
                return queryset.filter(per_key)
            case "none":
                return queryset.exclude(capacity | max_hold | per_key)
        return queryset


class DeclaredFilter(admin.SimpleListFilter):
    title = "declared"
    parameter_name = "declared"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("yes", "Declared"), ("no", "Undeclared (left the config)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Limit]) -> QuerySet[Limit]:
        if self.value() in ("yes", "no"):
            return queryset.filter(declared=self.value() == "yes")
        return queryset


class PausedFilter(admin.SimpleListFilter):
    title = "grants"
    parameter_name = "paused"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("yes", "Paused"), ("no", "Running")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Limit]) -> QuerySet[Limit]:
        if self.value() in ("yes", "no"):
            return queryset.filter(paused_at__isnull=self.value() == "no")
        return queryset
