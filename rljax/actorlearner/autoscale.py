"""The actor count of a host-env run, following demand: a controller that adds an actor when the learner
waits for rollouts the actors are busy collecting, keeps it only if the run got faster, and retires one
when the others could collect what it does.

After every update the learner hands :meth:`Scaler.observe` what it measured: its own busy fraction
(updating over updating plus waiting for the rollout: ``host/learner_busy``), the rollout's actor idle
fraction (the actor's waits for params and for room in the queue over its rollout's time:
``1 - host/actor_busy``), the update's seconds (waiting plus updating) and the rollouts left waiting
(``host/queue_depth``). Over a **window** of the last ``window`` updates measured at the current count
``n`` (``B`` and ``I`` their means, ``R`` the updates per second):

* **up** (``n < max_actors``): ``B < learner_busy_low`` (the learner waits for rollouts more than 20 %
  of the time, by default) while ``I < actor_idle_low`` (the actors are collecting, not waiting on
  params or on the queue): an actor more adds supply the learner is short of.
* **pay-off**: the first full window after an added actor must show ``R`` up by at least
  ``min_gain`` of the ideal gain ``1/n`` (``R' >= R (1 + min_gain / n)``). Where the actors share the
  CPU with the learner (an env stepped by Python under the GIL, a policy on the learner's cores), busy
  actors and a waiting learner do not mean that another actor helps; when it did not, it is retired
  at once and the count is **held** at ``n`` for ``hold`` windows, or until the learner waits clearly
  more than it did then (its busy fraction ``release`` below the one that asked for the actor: the
  envs got slower, and another actor may now help).
* **down** (``n > min_actors``), either of:
  the collecting the ``n`` actors do, ``n (1 - I)`` actors' worth, fits in ``n - 1`` actors kept at
  most ``actor_busy_target`` busy (``n (1 - I) <= (n - 1) actor_busy_target``: idle actors wait for
  room in the queue, or for params when the policy-lag bound limits the rollouts in flight to
  ``max_policy_lag + 1``); or rollouts waited in the queue through the window (mean depth ``>= 1``)
  while ``B >= learner_busy_high``: the actors collect more than the learner learns from (this one
  holds where actors look busy only because they share the CPU with the learner). A retirement is on
  probation too: if ``R`` fell by ``min_gain / n`` or more, the actor is added back and the count
  held at ``n`` or more for ``hold`` windows.

``actor_busy_target`` is below ``1 - actor_idle_low``, so the actors left after a retirement are
expected to idle more than the up rule allows: the rules leave a band between them, and with the
pay-off check and the hold, the count does not oscillate. After every change the window starts over
(**cool-down**: the next decision waits for ``window`` updates measured at the new count), and the
first ``warmup`` updates of the run (compilation, the first rollouts) are left out. A decision comes
with its reason and measurements, which the run logs as an event and in its rows (``host/actors``,
``host/scale``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["ScaleRule", "Scaler", "Decision"]


@dataclasses.dataclass(frozen=True)
class ScaleRule:
    """When the actor count changes (module docstring).

    Attributes:
        min_actors, max_actors: the bounds of the count.
        window: updates measured before a decision (also the cool-down after a change).
        warmup: updates at the run's start left out.
        learner_busy_low: scale up below this mean learner busy fraction ...
        actor_idle_low: ... while the actors' mean idle fraction is below this.
        learner_busy_high: scale down when rollouts wait in the queue and the learner is at least this busy.
        actor_busy_target: scale down when ``n - 1`` actors at this busy fraction would collect as much
            (below ``1 - actor_idle_low``: the band between the rules).
        min_gain: the share of the ideal gain ``1/n`` in updates per second an added actor must bring.
        hold: windows the count stays at most ``n`` after an actor that did not pay off ...
        release: ... unless the learner's busy fraction falls this far below the one measured then.
    """

    min_actors: int
    max_actors: int
    window: int = 8
    warmup: int = 2
    learner_busy_low: float = 0.8
    learner_busy_high: float = 0.95
    actor_idle_low: float = 0.2
    actor_busy_target: float = 0.75
    min_gain: float = 0.25
    hold: int = 8
    release: float = 0.15

    def __post_init__(self):
        for name, low in (("min_actors", 1), ("max_actors", 1), ("window", 1), ("warmup", 0), ("hold", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name}={value!r}: must be an integer >= {low}")
        if self.min_actors > self.max_actors:
            raise ValueError(f"min_actors={self.min_actors} is more than max_actors={self.max_actors}")
        for name in ("learner_busy_low", "learner_busy_high", "actor_idle_low", "actor_busy_target", "min_gain",
                     "release"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be in (0, 1]")
        if self.actor_busy_target >= 1 - self.actor_idle_low:
            raise ValueError(f"actor_busy_target={self.actor_busy_target} must be below 1 - actor_idle_low = "
                             f"{1 - self.actor_idle_low:g}: actors left that busy after a retirement would be "
                             f"added back at once (the count would oscillate)")


@dataclasses.dataclass(frozen=True)
class Decision:
    """A change of the actor count to ``to`` (``change`` = +1 or -1), why, and what was measured
    (the window's means and its updates per second); ``undo``: it takes back a change that did not
    pay off (not itself on probation)."""

    change: int
    to: int
    reason: str
    learner_busy: float
    actor_idle: float
    updates_per_s: float
    undo: bool = False

    def record(self) -> dict[str, Any]:
        return {"actors": self.to, "change": self.change, "reason": self.reason,
                "learner_busy": round(self.learner_busy, 4), "actor_idle": round(self.actor_idle, 4),
                "updates_per_s": round(self.updates_per_s, 4)}


class Scaler:
    """Applies a :class:`ScaleRule` to the measurements of each update; holds the current count."""

    def __init__(self, rule: ScaleRule, count: int):
        if not rule.min_actors <= count <= rule.max_actors:
            raise ValueError(f"the actor count {count} is outside [{rule.min_actors}, {rule.max_actors}]")
        self.rule, self.count = rule, count
        self._seen, self._window = 0, []
        # The change on probation: (+1 or -1, the count before, updates/s and learner busy before it).
        self._probe: tuple[int, int, float, float] | None = None
        # After a change that did not pay off: the count held as a ceiling (an actor more did not help) or a
        # floor (an actor fewer slowed the run), each for how many more updates; the learner busy that asked
        # for the actor the ceiling refuses.
        self._ceiling, self._ceiling_held, self._held_busy = rule.max_actors, 0, 0.0
        self._floor, self._floor_held = rule.min_actors, 0

    def observe(self, learner_busy: float, actor_idle: float, update_s: float, queue_depth: float = 0.0
                ) -> Decision | None:
        """One update's measurements (``queue_depth``: rollouts waiting for the learner after it); a
        :class:`Decision` when the count should change (the caller applies it with :meth:`applied`, or
        measures afresh with :meth:`reset_window` when it could not)."""
        self._seen += 1
        if self._ceiling_held > 0:
            self._ceiling_held -= 1
            if self._ceiling_held == 0:
                self._ceiling = self.rule.max_actors
        if self._floor_held > 0:
            self._floor_held -= 1
            if self._floor_held == 0:
                self._floor = self.rule.min_actors
        if self._seen <= self.rule.warmup:
            return None
        self._window.append((float(learner_busy), float(actor_idle), float(update_s), float(queue_depth)))
        r, n = self.rule, self.count
        if len(self._window) < r.window:
            return None
        self._window = self._window[-r.window:]
        b, i, _, q = (sum(w[k] for w in self._window) / r.window for k in range(4))
        rate = r.window / max(sum(w[2] for w in self._window), 1e-9)
        if self._probe is not None:
            undo = self._paid_off(rate, b, i)
            if undo is not None:
                return undo
        if self._ceiling_held > 0 and b < self._held_busy - r.release:
            self._ceiling, self._ceiling_held = r.max_actors, 0  # the envs got slower: another actor may help
        if n < min(r.max_actors, self._ceiling) and b < r.learner_busy_low and i < r.actor_idle_low:
            return Decision(+1, n + 1, f"the learner waited for rollouts (busy {b:.2f} < {r.learner_busy_low}) "
                                       f"while the actors collected (idle {i:.2f} < {r.actor_idle_low}) over "
                                       f"{r.window} updates", b, i, rate)
        if n > max(r.min_actors, self._floor):
            if n * (1 - i) <= (n - 1) * r.actor_busy_target:
                return Decision(-1, n - 1, f"{n} actors were busy {1 - i:.2f} of the time over {r.window} updates: "
                                           f"{n - 1} at most {r.actor_busy_target} busy collect as much (learner "
                                           f"busy {b:.2f})", b, i, rate)
            if q >= 1 and b >= r.learner_busy_high:
                return Decision(-1, n - 1, f"rollouts waited for the learner (queue depth {q:.2f} >= 1, learner "
                                           f"busy {b:.2f}) over {r.window} updates: the actors collect more than it "
                                           f"learns from", b, i, rate)
        return None

    def _paid_off(self, rate: float, b: float, i: float) -> Decision | None:
        """Judges the change on probation by the first full window after it: an added actor must raise
        the updates per second by ``min_gain`` of the ideal ``1/n``, a retired one must not lower them by
        as much; otherwise the change is undone and the count held there (a ceiling or a floor)."""
        r, n = self.rule, self.count
        change, before, before_rate, before_busy = self._probe
        self._probe = None
        if change > 0:
            need = before_rate * (1 + r.min_gain / before)
            if rate < need:
                if r.hold:
                    self._ceiling, self._ceiling_held, self._held_busy = before, r.hold * r.window, before_busy
                return Decision(-1, before, f"actor {n} did not pay off: {rate:.3g} updates/s against "
                                            f"{before_rate:.3g} with {before} (at least {need:.3g} expected); "
                                            f"held at {before} for {r.hold * r.window} updates", b, i, rate, undo=True)
            return None
        floor = before_rate * (1 - r.min_gain / before)
        if rate < floor:
            if r.hold:
                self._floor, self._floor_held = before, r.hold * r.window
            return Decision(+1, before, f"retiring actor {before} slowed the run: {rate:.3g} updates/s against "
                                        f"{before_rate:.3g} with {before} (at least {floor:.3g} expected); held at "
                                        f"{before} or more for {r.hold * r.window} updates", b, i, rate, undo=True)
        return None

    def applied(self, decision: Decision) -> None:
        """The count is now ``decision.to``; a change the controller chose (not an undo) is on probation
        until the next full window; the window starts over (the cool-down)."""
        if not decision.undo:
            self._probe = (decision.change, self.count, decision.updates_per_s, decision.learner_busy)
        self.count = decision.to
        self.reset_window()

    def reset_window(self) -> None:
        """Forget the measurements (a change was made or failed: measure afresh before deciding again)."""
        self._window = []
