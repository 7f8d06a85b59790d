"""PPO on Pendulum-v1 (continuous actions, Gaussian policy, observation and reward normalisation).

    python -m experiments.ppo_pendulum                          # 5e5 steps, mean return about -200
    python -m experiments.ppo_pendulum --seed 1 --run-dir runs/pend1
    python -m experiments.ppo_pendulum --env MountainCarContinuous-v0   # any env with Box actions
"""

import sys

from rljax.agents.ppo import PPOConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(
    env="Pendulum-v1", total_timesteps=500_000, num_envs=64, num_steps=32, num_epochs=10,
    num_minibatches=8, learning_rate=1e-3, gamma=0.95, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.0,
    vf_coef=0.5, max_grad_norm=0.5, normalize_obs=True, normalize_reward=True,
)


def main(argv=None) -> int:
    return run_experiment(PPOConfig, DEFAULTS, argv, description=__doc__, name="ppo_pendulum")


if __name__ == "__main__":
    sys.exit(main())
