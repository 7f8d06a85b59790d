"""``status.json`` and ``stop.request`` (:mod:`rljax.store.status`): the states a reader sees (a
running run's age against its stall threshold, a holder on this host that is gone), a damaged file,
and a stop request taken once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from rljax.store.status import STATUS_FILE, STOP_FILE, read_status, request_stop, take_stop_request, write_status


def test_states_as_a_reader_sees_them(tmp_path):
    assert read_status(tmp_path)["state"] == "not started"
    write_status(tmp_path, {"state": "running", "env_steps": 10, "stall_after_s": 60.0})
    record = read_status(tmp_path)
    assert record["state"] == "running" and record["pid"] == os.getpid() and record["host"] == socket.gethostname()
    assert read_status(tmp_path, now=record["updated_unix"] + 61)["state"] == "stalled"
    assert read_status(tmp_path, now=record["updated_unix"] + 59)["age_s"] == pytest.approx(59)
    # A running run whose process on this host is gone was killed outright.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    data = json.loads((tmp_path / STATUS_FILE).read_text()) | {"pid": int(gone.stdout)}
    (tmp_path / STATUS_FILE).write_text(json.dumps(data))
    assert read_status(tmp_path)["state"] == "failed" and "gone" in read_status(tmp_path)["reason"]
    # On another host nothing can be told about the process: the age decides.
    (tmp_path / STATUS_FILE).write_text(json.dumps(data | {"host": "elsewhere"}))
    assert read_status(tmp_path)["state"] == "running"
    write_status(tmp_path, {"state": "finished"})
    assert read_status(tmp_path, now=10 ** 12)["state"] == "finished"  # only a running run goes stale


@pytest.mark.parametrize("written, read", [
    ({"state": "running", "phase": "compiling"}, ("running", "compiling")),
    ({"state": "running", "phase": "training", "updated_unix": 0.0, "stall_after_s": 60.0}, ("stalled", "training")),
    ({"state": "finished", "phase": "training"}, ("finished", "ended")),  # regression: "training" stood
    ({"state": "preempted", "phase": "training"}, ("preempted", "ended")),
    ({"state": "failed", "phase": "compiling"}, ("failed", "ended")),
])
def test_the_phase_of_a_run_that_has_ended_is_ended(tmp_path, written, read):
    (tmp_path / STATUS_FILE).write_text(json.dumps({"updated_unix": 1e12, "host": socket.gethostname(),
                                                     "pid": os.getpid(), **written}))
    record = read_status(tmp_path, now=1e12 if written.get("updated_unix") is None else 1e3)
    assert (record["state"], record["phase"]) == read


@pytest.mark.parametrize("text, message", [
    ("{not json", "status.json is not valid JSON"),
    ("[1]", r"status.json is damaged \(expected a JSON object, got list\)"),  # regression: an AttributeError
    ('{"state": "running", "updated_unix": "x"}', "status.json is damaged .*could not convert string"),
])
def test_a_damaged_status_names_the_file(tmp_path, text, message):
    (tmp_path / STATUS_FILE).write_text(text)
    with pytest.raises(ValueError, match=message):
        read_status(tmp_path)


def test_a_stop_request_is_taken_once(tmp_path):
    assert take_stop_request(tmp_path) is None
    path = request_stop(tmp_path, requester="ops")
    assert path == tmp_path / STOP_FILE
    request = take_stop_request(tmp_path)
    assert request["by"] == "ops" and request["host"] == socket.gethostname() and not path.exists()
    assert take_stop_request(tmp_path) is None
    path.write_text("garbage")  # a damaged request is still a request
    assert take_stop_request(tmp_path) == {}
