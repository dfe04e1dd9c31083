"""Issue 11: Studio shows user-supplied text (labels, a run's input, output and errors) with
control and bidirectional-override characters visibly escaped, so a right-to-left override
cannot reverse what follows it; long values are cut or wrapped, and shown whole on demand."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from limits import services
from stackbone.models import Run, Step

pytestmark = pytest.mark.django_db

RLO_LABEL = "order\u202e77-lave"
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_a_right_to_left_override_label_is_shown_escaped_on_the_limit_page(busy_limit, operator_client) -> None:
    services.set_capacity("voice-calls", 3, actor="test")  # run-2 gets a slot: one more room
    services.set_capacity("voice-calls", 10, actor="test")
    services.acquire("voice-calls", run_id="run-x", label=RLO_LABEL)
    services.acquire("voice-calls", run_id="run-y", label="bell\x07\x1b[0m")
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    assert not BIDI.search(page)
    assert "\x07" not in page and "\x1b" not in page
    assert '<span class="long-value" title="order\\u202e77-lave">order\\u202e77-lave</span>' in page
    assert "(order\\u202e77-lave)? The work keeps running" in page  # the release confirmation
    assert "bell\\x07\\x1b[0m" in page


def test_a_right_to_left_override_in_the_queue_is_shown_escaped(busy_limit, operator_client) -> None:
    services.acquire("voice-calls", run_id="run-q", label=RLO_LABEL)
    page = operator_client.get("/studio/limits/voice-calls/").content.decode()
    assert not BIDI.search(page)
    assert "order\\u202e77-lave" in page


@pytest.fixture
def hostile_run(busy_limit) -> Run:
    """A failed run whose input, output, step and error hold controls and overrides, holding a
    slot with a 10,000-character label."""
    now = timezone.now()
    run = Run.objects.create(
        workflow="place_call",
        input={"to": "\u202e000 000 006 43+", "long": "x" * 10_000},
        output={"note": "\u2066isolated\u2069"},
        status=Run.Status.FAILED,
        error="Traceback\n  \x1b[31mboom\x1b[0m \u202eevil",
        created_at=now,
        started_at=now,
        finished_at=now,
        updated_at=now,
    )
    Step.objects.create(
        run=run, seq=1, name="dial", status="failed", error="\u202estep\nfailed", started_at=now, finished_at=now
    )
    services.set_capacity("voice-calls", 10, actor="test")
    services.acquire("voice-calls", run_id=run.id, label="L" * 200)
    return run


def test_the_run_page_shows_input_output_and_errors_escaped(hostile_run, operator_client) -> None:
    page = operator_client.get(f"/studio/runs/{hostile_run.id}/").content.decode()
    assert not BIDI.search(page)
    assert "\x1b" not in page
    assert "\\u202e000 000 006 43+" in page
    assert "\\u2066isolated\\u2069" in page
    assert "Traceback\n  \\x1b[31mboom\\x1b[0m \\u202eevil" in page  # lines kept, controls shown
    assert "\\u202estep\nfailed" in page


def test_a_long_label_on_the_run_page_is_cut_and_shown_whole_in_its_title(hostile_run, operator_client) -> None:
    page = operator_client.get(f"/studio/runs/{hostile_run.id}/").content.decode()
    label = "L" * 200
    assert f'<span class="long-value" title="{label}">{label}</span>' in page
    assert "x" * 10_000 in page  # the whole input is on the page, wrapped by the style sheet


def test_the_style_sheet_wraps_blocks_and_cuts_long_values() -> None:
    from django.conf import settings

    css = (settings.BASE_DIR / "limits" / "static" / "studio" / "studio.css").read_text()
    assert re.search(r"pre \{[^}]*white-space: pre-wrap;[^}]*overflow-wrap: anywhere", css)
    assert re.search(r"\.long-value \{[^}]*max-width:[^}]*text-overflow: ellipsis", css)
    assert "grid-template-columns: minmax(0, 1fr) minmax(0, 1fr)" in css  # a wide <pre> cannot widen .io
