"""The deploy recipes (deploy/slurm/train.sbatch, deploy/kubernetes/indexed-job.yaml) start a training
command that parses as written and can resume on another node count (an elastic resume keeps
``num_envs``, so the recipes fix it and leave ``--num-devices`` to the job)."""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest

from experiments import ppo_cartpole
from rljax.agents.ppo import PPOConfig
from rljax.cli.flags import build_parser, config_from_args

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _sbatch_flags() -> list[str]:
    text = (ROOT / "deploy" / "slurm" / "train.sbatch").read_text()
    command = text[text.index("exec rljax supervise"):].replace("\\\n", " ")
    num_envs = re.search(r"NUM_ENVS=\$\{NUM_ENVS:-(\d+)\}", text).group(1)
    command = command.replace('"$NUM_ENVS"', num_envs).replace('"$RUN_DIR"', "runs/x")
    tokens = shlex.split(command.splitlines()[0])
    return tokens[tokens.index("experiments.ppo_cartpole") + 1:]


def _kubernetes_flags() -> list[str]:
    text = (ROOT / "deploy" / "kubernetes" / "indexed-job.yaml").read_text()
    args = re.findall(r"^\s+- (--[\w-]+=\S+)", text, flags=re.M)
    assert args, "no training flags found in the Job's args"
    return args


@pytest.mark.parametrize("flags", [_sbatch_flags(), _kubernetes_flags()], ids=["slurm", "kubernetes"])
def test_the_recipe_parses_and_can_resume_on_any_node_count_it_may_meet(flags):
    assert not any(f.startswith("--num-devices") for f in flags), "the job's devices: every one of them"
    config = config_from_args(PPOConfig, build_parser(PPOConfig, dict(ppo_cartpole.DEFAULTS)).parse_args(flags))
    for devices in (8, 16, 32):  # 1, 2 or 4 nodes of 8 GPUs
        assert config.num_envs % devices == 0, (config.num_envs, devices)
    assert config.total_timesteps >= 1e9
