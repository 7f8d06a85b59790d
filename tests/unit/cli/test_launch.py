"""``rljax launch`` (:mod:`rljax.cli.launch`): each process's environment, the job's exit status from
its processes', and the options checked before anything starts."""

from __future__ import annotations

import argparse
import sys

import pytest

from rljax.cli.flags import UsageError
from rljax.cli.launch import job_command, job_status, process_env
from rljax.cli.main import main


def test_each_process_gets_its_place_in_the_job_and_its_own_gpus():
    env = process_env({"PATH": "/bin"}, 1, 3, 2, 4321)
    assert env == {"PATH": "/bin", "RLJAX_COORDINATOR": "127.0.0.1:4321", "RLJAX_NUM_PROCESSES": "3",
                   "RLJAX_PROCESS_ID": "1", "RLJAX_DEVICES_PER_PROCESS": "2", "CUDA_VISIBLE_DEVICES": "2,3",
                   "PYTHONUNBUFFERED": "1"}
    assert process_env({"CUDA_VISIBLE_DEVICES": "5"}, 1, 3, 2, 1)["CUDA_VISIBLE_DEVICES"] == "5"   # left as set


@pytest.mark.parametrize("codes, first_failure, status", [
    ([0, 0], None, 0),
    ([0, 75], None, 75),          # a preempted process: the job was preempted
    ([3, 75], None, 3),           # a failure outranks a preemption
    ([0, -9, 1], 1, 137),         # the first failure's: death by SIGKILL is 128 + 9
    ([1, 2], 1, 2),
])
def test_the_jobs_status(codes, first_failure, status):
    assert job_status(codes, first_failure) == status


def _args(*argv):
    return argparse.Namespace(**{"num_processes": 2, "devices_per_process": 1, "port": 0, "peer_timeout": 60.0,
                                 "command": list(argv)})


def test_the_command_comes_after_the_separator():
    assert job_command(_args("--", "python", "-m", "x", "--seed", "1")) == ["python", "-m", "x", "--seed", "1"]
    assert job_command(_args("python", "x")) == ["python", "x"]
    with pytest.raises(UsageError, match="give the train command after --"):
        job_command(_args("--"))


@pytest.mark.parametrize("argv, message", [
    (["-n", "0"], "--num-processes must be >= 1, got 0"),
    (["-n", "1", "-d", "0"], "--devices-per-process must be >= 1, got 0"),
    (["-n", "1", "--port", "70000"], "--port must be in 0..65535, got 70000"),
    (["-n", "1", "--peer-timeout", "0"], "--peer-timeout must be > 0 seconds, got 0.0"),
])
def test_bad_options_are_usage_errors(argv, message, capsys):
    assert main(["launch", *argv, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: rljax launch") and f"rljax launch: error: {message}\n" in err


def test_the_process_count_is_required(capsys):
    assert main(["launch", "--", "true"]) == 2
    assert "the following arguments are required: -n/--num-processes" in capsys.readouterr().err


def test_a_failing_process_is_the_jobs_status(capsys):
    assert main(["launch", "-n", "1", "--peer-timeout", "5", "--", sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    assert "rljax launch: process 0 of 1 ended with status 3" in capsys.readouterr().err
