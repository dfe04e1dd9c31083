"""The workflows this installation can run: registered by @workflow (or by the module a name
points at), found by name, and what a run of one is found by in a search (its reference)."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from stackbone.runs.errors import UNKNOWN_WORKFLOW, WorkflowError
from stackbone.runs.json_values import unstorable


@dataclass(frozen=True)
class Workflow:
    name: str
    fn: Callable[[Any], Any]
    reference: str = ""  # the field of its input a run is found by (reference_of), "" for none

    def __call__(self, input: Any) -> Any:
        return self.fn(input)


_registry: dict[str, Workflow] = {}
_discovered = False

REFERENCE_MAX_LENGTH = 128  # a reference longer than this is not kept: a search reads at most 128 characters
BAD_REFERENCE = (
    "workflow {name!r}: reference must name a field of the input (a string of 1 to 200 characters), not {value!r}"
)


def check_reference(name: str, reference: object) -> str:
    """The field a workflow names as its reference, "" for None; anything else is a WorkflowError."""
    if reference is None:
        return ""
    if not isinstance(reference, str) or not 1 <= len(reference) <= 200 or unstorable(reference) is not None:
        raise WorkflowError(BAD_REFERENCE.format(name=name, value=reference))
    return reference


def reference_of(wf: Workflow, input: Any) -> str:
    """What a run of `wf` with `input` is found by (its reference field's value, as text), or "":

    - text is kept without its surrounding spaces, numbers as JSON writes them (42, 4.5);
    - no field, an empty text, true/false, null, an object or a list: none (they name no one run);
    - text longer than REFERENCE_MAX_LENGTH: none, as a search could not match it whole.

    The input is already checked (_check_json), so the text holds no NUL and no lone surrogate."""
    if not wf.reference or not isinstance(input, dict):
        return ""
    value = input.get(wf.reference)
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        text = json.dumps(value)
    else:
        return ""
    if len(text) > REFERENCE_MAX_LENGTH or unstorable(text) is not None:
        return ""
    return text


def workflow(fn: Callable[[Any], Any] | None = None, *, name: str | None = None, reference: str | None = None) -> Any:
    """Register a workflow function under its name (or `name`). Use as @workflow or
    @workflow(name=..., reference=...): `reference` names the field of the input each run is
    found by in a search (reference_of)."""

    def register(fn: Callable[[Any], Any]) -> Workflow:
        workflow_name = name or fn.__name__
        wf = Workflow(name=workflow_name, fn=fn, reference=check_reference(workflow_name, reference))
        existing = _registry.get(wf.name)
        if existing is not None and existing.fn.__qualname__ != fn.__qualname__:
            raise WorkflowError(f"two workflows are named {wf.name!r}: pass workflow(name=...) to tell them apart")
        _registry[wf.name] = wf
        return wf

    return register(fn) if fn is not None else register


def get_workflow(name: str) -> Workflow:
    discover()
    found = _registry.get(name)
    if found is None:
        found = _registered_by_its_module(name)
    if found is None:
        raise WorkflowError(UNKNOWN_WORKFLOW.format(name=name))
    return found


def _registered_by_its_module(name: str) -> Workflow | None:
    """A workflow named by its module path (`billing.tasks.send_invoice`: a django.tasks task,
    limits.django_tasks) registers when its module is imported, which a worker may not have done:
    import that module and look again. Only a module of the project's own packages (its installed
    apps' and its settings'), never whatever a run row or a start request names."""
    module, _, attribute = name.rpartition(".")
    if not module or not attribute or module.split(".")[0] not in _project_packages():
        return None
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and (module == error.name or module.startswith(f"{error.name}.")):
            return None  # no such module: an unknown workflow, not a broken one
        raise
    return _registry.get(name)


def _project_packages() -> set[str]:
    from django.apps import apps

    packages = {config.name.split(".")[0] for config in apps.get_app_configs()}
    settings_module = getattr(settings, "SETTINGS_MODULE", None)
    if settings_module:
        packages.add(settings_module.split(".")[0])
    return packages


def workflow_names() -> list[str]:
    """Every workflow this installation can start (the modules settings.STACKBONE_WORKFLOWS names,
    imported on first use), sorted."""
    discover()
    return sorted(_registry)


def discover() -> None:
    """Import the modules settings.STACKBONE_WORKFLOWS names (packages with their submodules)."""
    global _discovered
    if _discovered:
        return
    for module_name in getattr(settings, "STACKBONE_WORKFLOWS", []):
        module = importlib.import_module(module_name)
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=f"{module_name}."):
            importlib.import_module(info.name)
    _discovered = True
