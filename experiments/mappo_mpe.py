"""MAPPO on MPE simple_spread (JaxMARL's ``baselines/MAPPO/mappo_rnn_mpe.py`` configuration: 16 games x
128 steps, 4 epochs x 4 minibatches of whole rollouts, lr 2e-3 annealed, gamma 0.99, GAE lambda 0.95,
clip 0.2, entropy 0.01, value 0.5, grad norm 0.5; the actor Dense(128) -> GRU(128) -> Dense(128), ReLU,
shared by the three agents, no agent id; the critic Dense(128) -> GRU(128) -> Dense(128) on the
global state, every agent's observation concatenated; 1e7 joint steps). Needs the ``jaxmarl`` extra.
One difference, by design: rljax bootstraps through MPE's time limit, JaxMARL's scripts treat it as a
termination (``docs/multiagent.md``). Rows report the team's return (the sum of the three agents');
JaxMARL's script logs the mean per agent times three, the same number.

    python -m experiments.mappo_mpe                                  # 1e7 joint steps
    python -m experiments.mappo_mpe --memory none --hidden-sizes 64,64 --activation tanh --learning-rate 2.5e-4
"""

import sys

from rljax.agents.mappo import MAPPOConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="jaxmarl/MPE_simple_spread_v3", total_timesteps=10_000_000, num_envs=16, num_steps=128,
                num_epochs=4, num_minibatches=4, memory="gru", memory_size=128, hidden_sizes=(128,),
                activation="relu", learning_rate=2e-3, agent_id=False)


def main(argv=None) -> int:
    return run_experiment(MAPPOConfig, DEFAULTS, argv, description=__doc__, name="mappo_mpe")


if __name__ == "__main__":
    sys.exit(main())
