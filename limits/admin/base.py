"""What every ModelAdmin of limits shares: a bad date or search term answers no rows instead of a
500, user-supplied text is shown escaped (limits.printable), a change form saves through
limits.services, and the rows only the services write are read-only. limits.runs.admin builds on
these too."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_protect

from limits.printable import printable
from stackbone.plumbing.access import OPERATE_LIMIT

SEARCH_MAX_LENGTH = 200  # the longest text any admin searches (a label)
BAD_SELECTED = "the selected row {value!r} is not the id of a {name}: nothing done"
NO_MAX_HOLD = "—"  # a workflow's own bound: a run holds its slot until it ends

if TYPE_CHECKING:  # the stubs' generic classes, which are not subscriptable at run time
    AnyModelAdmin = admin.ModelAdmin[Any]
    _DateBoundsBase = admin.ModelAdmin[Any]  # what the mixin is mixed into
else:
    AnyModelAdmin = admin.ModelAdmin
    _DateBoundsBase = object


class DateBoundsMixin(_DateBoundsBase):
    """Out-of-range dates in a changelist's date hierarchy or date filter are a bad lookup, not a
    500. Django turns a bad date value into "invalid lookup" (a redirect to ?e=1), except a year,
    month or day too large for a C int (?created_at__year=99999999999), which raises
    OverflowError while the changelist is built. Every ModelAdmin here uses this mixin (through
    BoundedSearchAdmin), so a date hierarchy added later is guarded too."""

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            return super().get_changelist_instance(request)
        except OverflowError:
            raise IncorrectLookupParameters from None


class BoundedSearchAdmin(DateBoundsMixin, AnyModelAdmin):
    """A search term longer than any searched field can match nothing: answer with no rows
    instead of handing the database a pattern it refuses (SQLite: "LIKE pattern too complex")."""

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any], search_term: str) -> Any:
        if len(search_term) > SEARCH_MAX_LENGTH:
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)


def escaped(name: str) -> Callable[[Any, models.Model], str | None]:
    """A read-only display of the text field `name`, escaped by limits.printable (a text field
    keeps its lines; a JSON field is shown as JSON), sorted by the field itself."""

    @admin.display(description=name.replace("_", " "), ordering=name)
    def show(model_admin: Any, obj: models.Model) -> str | None:
        value, field = getattr(obj, name), obj._meta.get_field(name)
        if value is None:
            return None  # the admin's empty value
        if isinstance(field, models.JSONField):
            return printable(json.dumps(value, ensure_ascii=False, cls=field.encoder))
        return printable(value, lines=isinstance(field, models.TextField))

    return show


class EscapedTextAdmin(BoundedSearchAdmin):
    """Shows the user-supplied text fields named in `escaped_fields` (keys, labels, run ids,
    errors) with control and bidirectional-formatting characters written as escapes (`\\u202e`,
    `\\x1b`), as Studio and the CLI show them: a right-to-left override cannot reverse the
    columns after it. Each field `f` is shown, in the changelist and on the change page, by the
    read-only display `f_escaped` (made here), which sorts by `f`; searches still match the stored
    text. list_display, list_display_links, fields and readonly_fields name the fields themselves."""

    escaped_fields: ClassVar[tuple[str, ...]] = ()

    def response_action(self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any) -> Any:
        """A selected row that is no id of this model (a hand-made POST, `_selected_action=abc` for
        a limit's numeric id) is a 400 that says so, as Studio's forms answer bad input; Django
        would pass it to the query, and answer 500 (issue 45)."""
        pk = self.model._meta.pk
        for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
            try:
                if pk is not None:
                    pk.to_python(value)
            except ValidationError:
                name = self.model._meta.verbose_name
                return HttpResponseBadRequest(BAD_SELECTED.format(value=printable(value), name=name), "text/plain")
        return super().response_action(request, queryset, *args, **kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.escaped_fields:
            setattr(cls, f"{name}_escaped", escaped(name))

    def _escaped(self, names: Sequence[Any]) -> list[Any]:
        """`names` with each escaped field replaced by its display, each once, in place."""
        shown = [f"{name}_escaped" if name in self.escaped_fields else name for name in names]
        return list(dict.fromkeys(shown))

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return self._escaped(super().get_list_display(request))

    def get_list_display_links(self, request: HttpRequest, list_display: Any) -> Any:
        links = super().get_list_display_links(request, list_display)
        return links if links is None else self._escaped(links)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return self._escaped(super().get_fields(request, obj))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        escaped_names = [f"{name}_escaped" for name in self.escaped_fields]
        return self._escaped([*super().get_readonly_fields(request, obj), *escaped_names])


class SavedThroughServicesAdmin(EscapedTextAdmin):
    """A change form whose save calls limits.services instead of obj.save()."""

    @method_decorator(csrf_protect)
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # ModelAdmin wraps this view in transaction.atomic(); the services run their own durable
        # transaction (the audit row commits with the change), which cannot nest inside it.
        response: HttpResponse = self._changeform_view(  # type: ignore[attr-defined]  # Django's, not in the stubs
            request, object_id, form_url, extra_context
        )
        return response


class ReadOnlyAdmin(EscapedTextAdmin):
    """Rows written only by the services: visible, never added, changed or deleted here. An
    operator (limits.operate_limit) may view them, so the Slots list and its release action need
    no other permission."""

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(OPERATE_LIMIT)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
