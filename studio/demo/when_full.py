"""What the demo's runs do instead of waiting when a limit is full (SPEC 14), a part of its loop
(studio/demo/__main__.py) that a test drives on its own clock (tests/test_demo_when_full.py).

From the demo's first seconds, and again every ROUND seconds, each scene below plays once, with
the example workflows of studio/workflows/when_full.py, so that within a minute Studio shows:

- a skip: two `rebuild_search_index` runs started together; its bound (`total: 1, on_full:
  "skip"`) runs the first and ends the second at once, `skipped` ("the limit is full"): the run's
  page says so in its Outcome, the bound's page (workflow.rebuild_search_index) in its Activity;
- a refusal by a queue cap: three `send_digest` runs started together; its bound (`total: 1,
  max_waiting: 1`) runs the first, queues the second and ends the third `skipped`, "the queue is
  full" (its page, and the bound's Activity and "refused" count);
- a replace: three `refresh_account` runs of one account on `account-refresh` (its workspace
  declares `per_key: 1, on_full: "replace"`): of the first two one holds the account's slot and
  the other waits for it, and the third takes that one's place in the queue: the run replaced
  ends with `{"replaced_by_run": <the third>}` and the limit's page counts it replaced. The slots are given
  back REFRESH_HOLD seconds later through the API (services.release: no run, as load.py's jobs).

The demo prints each scene's runs the first time, with the pages to open.

- a cancel_running: two `deploy_branch` runs of one branch started together; its bound
  (`per_key: 1, on_full: "cancel_running"`) gives the first the branch's slot, and the second
  cancels it (SPEC 14.4): the first ends `cancelled`, its page naming the second in its Outcome
  ("Caused by"), the bound's page (workflow.deploy_branch) in its Activity and its "cancelled"
  count; the second takes the branch's slot and deploys. (With a worker quick enough to have the
  first already executing, it stops at its next step and only then frees the slot: 2.5.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from limits import services
from limits.models import QueueEntry
from stackbone.runs.models import FINISHED_STATUSES, Run
from studio.workflows import start_run

ROUND = 30.0  # seconds between two plays of the scenes
FIRST = 2.0  # seconds into the demo before the first play
REFRESH_HOLD = 12.0  # seconds a refresh_account keeps its slot
ACCOUNT = "acme"
SCENES = ("skip", "refuse", "replace", "cancel")  # the methods of WhenFull, in the order they play
BRANCH = "main"


@dataclass
class Scene:
    """What one scene of a play did: the runs it started (in order) and what each ended as."""

    name: str
    runs: list[str] = field(default_factory=list)

    def statuses(self) -> list[str]:
        found = dict(Run.objects.filter(id__in=self.runs).values_list("id", "status"))
        return [found.get(run_id, "") for run_id in self.runs]


class WhenFull:
    """The scenes, played from `start` (the loop's clock, seconds) on, every ROUND seconds. `say`
    hears one line per scene the first time it has played (the demo prints it)."""

    def __init__(self, start: float, say: Callable[[str], None] | None = None) -> None:
        self.next_play = start + FIRST
        self.say = say
        self.played: list[dict[str, Scene]] = []
        self.releases: list[tuple[float, str]] = []  # (when, slot id) of refresh_account's slots
        self._refreshes: set[str] = set()  # refresh_account runs not finished yet
        self._to_replace: Scene | None = None  # a replace scene whose third run starts once one waits
        self._told: set[str] = set()

    def tick(self, now: float, *, arrivals: bool = True) -> None:
        """Called by the loop every tick: play the scenes when due (unless `arrivals` is False:
        the demo is behind), finish a replace scene once its second run waits, give back the
        refreshes' slots whose time has come."""
        if arrivals and now >= self.next_play:
            self.next_play = now + ROUND
            self.played.append({name: getattr(self, name)() for name in SCENES})
        self._replace_when_waiting()
        finished = Run.objects.filter(id__in=self._refreshes, status__in=FINISHED_STATUSES)
        for run_id, output in finished.values_list("id", "output"):
            self._refreshes.discard(run_id)
            if slot_id := (output or {}).get("slot_id"):
                self.releases.append((now + REFRESH_HOLD, slot_id))
        for due, slot_id in [release for release in self.releases if release[0] <= now]:
            self.releases.remove((due, slot_id))
            services.release(slot_id)

    # --- the scenes -------------------------------------------------------------------------------

    def skip(self) -> Scene:
        """SPEC 14.2: two rebuilds at once under a bound that skips: the second ends skipped."""
        scene = Scene("skip")
        for _ in range(2):
            scene.runs.append(start_run("rebuild_search_index", {"seconds": 1, "demo": True}).id)
        self._tell(scene)
        return scene

    def refuse(self) -> Scene:
        """SPEC 14.5: three digests at once under `max_waiting: 1`: the third finds the queue full."""
        scene = Scene("refuse")
        for _ in range(3):
            scene.runs.append(start_run("send_digest", {"name": "daily", "seconds": 1, "demo": True}).id)
        self._tell(scene)
        return scene

    def replace(self) -> Scene:
        """SPEC 14.3: of the account's first two refreshes one holds its slot and the other waits;
        the third starts once one waits (_replace_when_waiting), and takes its place."""
        scene = Scene("replace")
        for label in ("refresh-1", "refresh-2"):
            scene.runs.append(self._refresh(label))
        self._to_replace = scene
        return scene

    def cancel(self) -> Scene:
        """SPEC 14.4: two deploys of one branch at once under a bound that cancels the running one:
        the first is cancelled by the second, which deploys."""
        scene = Scene("cancel")
        for _ in range(2):
            scene.runs.append(start_run("deploy_branch", {"seconds": 1, "demo": True}, concurrency_key=BRANCH).id)
        self._tell(scene)
        return scene

    def _replace_when_waiting(self) -> None:
        if self._to_replace is None:
            return
        scene = self._to_replace
        if QueueEntry.objects.filter(run_id__in=scene.runs, state=QueueEntry.State.WAITING).exists():
            self._to_replace = None
            scene.runs.append(self._refresh("refresh-3"))
            self._tell(scene)
        elif Run.objects.filter(id__in=scene.runs, status__in=FINISHED_STATUSES).count() == len(scene.runs):
            self._to_replace = None  # both got the slot in turn: nothing to replace this round

    def _refresh(self, label: str) -> str:
        run_id = start_run("refresh_account", {"account": ACCOUNT, "label": label, "demo": True}).id
        self._refreshes.add(run_id)
        return run_id

    def _tell(self, scene: Scene) -> None:
        if self.say is None or scene.name in self._told:
            return
        self._told.add(scene.name)
        self.say(f"when full, {scene.name}: " + ", ".join(f"/studio/runs/{run_id}/" for run_id in scene.runs))
