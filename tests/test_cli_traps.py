"""The command line's traps from issue 16, each reproduced before it was fixed: what a new user reads
(--help, the usage lines, `rljax envs`), what a run prints (the line before compiling, a resume of a
finished run, a sweep's progress and ranking) and what it records (the manifest's command line).
"""

from __future__ import annotations

import json
import sys

import pytest

from rljax import cli
from rljax.loop import MAX_AUTO_CHUNK, plan_updates


def test_the_automatic_chunk_is_at_most_200_updates():
    # 2170 updates: the nearest divisor of n to 200 within a factor 2 is 217, which the planner used
    # to pick although its docstring and --help say "at most 200".
    for n in [2170, 401, 398, 1990, 4000, 12345, 976, 7, 1]:
        plan = plan_updates(n * 4, 4)
        assert plan.updates_per_chunk <= MAX_AUTO_CHUNK, (n, plan)
        assert plan.num_chunks * plan.updates_per_chunk == plan.num_updates
        assert n <= plan.num_updates < n + plan.num_chunks, (n, plan)   # fewer than one update per chunk extra
    assert plan_updates(976 * 512, 512).updates_per_chunk == 122      # PureJaxRL's CartPole: 8 chunks of 122
    assert plan_updates(2170, 1).updates_per_chunk == 155              # a divisor of 2170 below 200


def test_total_timesteps_help_says_what_the_plan_does(capsys):
    # PPO on Pendulum: 2048 env steps per update, so 5e5 is 244 updates, run as 10 chunks of 25: 512,000 steps.
    plan = plan_updates(500_000, 2048)
    assert plan.total_env_steps == 512_000
    with pytest.raises(SystemExit):
        cli.main(["train", "ppo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "rounded to whole updates" not in text
    assert "rounded up to a whole number of equal chunks" in text
    assert "up to one update per chunk more" in text
