"""SIGTERM/SIGINT become a request to stop at the next chunk boundary (rljax.training.signals).

The signals are raised in this process with the guard's handlers installed (the guard restores the
previous handlers on exit, which is checked too); the forced exit after a repeated signal runs in a
subprocess (tests/unit/store/test_checkpoint.py, tests/integration/test_reliability.py).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import types

import pytest

from rljax.training.signals import PreemptionGuard


def test_request_from_code_stops_without_a_signal():
    guard = PreemptionGuard(enabled=False)
    assert not guard.requested and guard.signal_name is None
    guard.request("on_chunk")
    assert guard.requested and guard.signal_name == "on_chunk"


def test_sigterm_inside_the_guard_is_a_request_and_the_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with PreemptionGuard() as guard:
        assert signal.getsignal(signal.SIGTERM) != before[0]
        signal.raise_signal(signal.SIGTERM)
        assert guard.requested and guard.signal_name == "SIGTERM"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_second_sigint_interrupts_unless_the_run_is_finishing():
    with PreemptionGuard() as guard:
        signal.raise_signal(signal.SIGINT)
        assert guard.signal_name == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        guard.finishing = True  # saving after the stop: a second Ctrl-C lets the save complete
        signal.raise_signal(signal.SIGINT)
        assert guard.signal_name == "SIGINT"


def test_the_first_signal_is_announced_at_once_and_a_swallowed_second_ctrl_c_is_raised_at_the_boundary(capfd):
    # Ctrl-C during a compile printed nothing until the compile ended; a second one raised
    # KeyboardInterrupt wherever Python was, sometimes inside JAX's gc callback, which only prints it.
    with PreemptionGuard(announce=True) as guard:
        signal.raise_signal(signal.SIGINT)
        deadline = time.monotonic() + 5
        err = ""
        while "rljax: SIGINT" not in err and time.monotonic() < deadline:
            time.sleep(0.05)   # the watcher thread writes it
            err += capfd.readouterr().err
        assert err == ("rljax: SIGINT: stopping at the next chunk boundary with a checkpoint (after the compile or "
                       "chunk in progress); SIGINT again stops now, without saving\n")
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        # Had it been raised in a callback, Python would report it as unraisable: the guard keeps quiet...
        sys.unraisablehook(types.SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(),
                                                 exc_traceback=None, err_msg=None, object=None))
        assert capfd.readouterr().err == ""
        with pytest.raises(KeyboardInterrupt):   # ...and raises it again at the loop's next check
            guard.raise_if_interrupted()
    assert sys.unraisablehook != guard._unraisable


def test_a_disabled_guard_installs_nothing():
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionGuard(enabled=False):
        assert signal.getsignal(signal.SIGTERM) == before


def test_a_guard_outside_the_main_thread_installs_nothing():
    made = []
    thread = threading.Thread(target=lambda: made.append(PreemptionGuard()))
    thread.start()
    thread.join()
    assert made[0].enabled is False


def test_a_deferred_signal_is_acted_on_only_at_the_agreement():
    """Several processes stop together: the signal waits for the boundary's agreement, which also
    hands out the leader's clock (one process: its own)."""
    with PreemptionGuard(deferred=True) as guard:
        guard.local_clock = lambda: 12.5
        signal.raise_signal(signal.SIGTERM)
        assert not guard.requested and guard.pending == signal.SIGTERM
        guard.agree()
        assert guard.signal_name == "SIGTERM (process 0)" and guard.agreed_clock == 12.5
