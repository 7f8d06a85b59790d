"""IPPO on MPE simple_spread (JaxMARL's ``baselines/IPPO/ippo_ff_mpe.py`` configuration: 16 games x 128
steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, gamma 0.99, GAE lambda 0.95, clip 0.2, entropy
0.01, value 0.5, grad norm 0.5, separate 2x64 tanh actor and critic shared by the three agents, no
agent id, 1e7 joint steps). Needs the ``jaxmarl`` extra. Rows report the team's return (the sum of
the three agents'); JaxMARL's script logs the mean per agent, a third of it (``docs/multiagent.md``).

    python -m experiments.ippo_mpe                                   # 1e7 joint steps
    python -m experiments.ippo_mpe --separate-params                 # one network per agent
    python -m experiments.ippo_mpe --agent-id                        # tell the shared network which agent
"""

import sys

from rljax.agents.mappo import IPPOConfig
from rljax.cli.experiment import run_experiment

DEFAULTS = dict(env="jaxmarl/MPE_simple_spread_v3", total_timesteps=10_000_000, num_envs=16, num_steps=128,
                num_epochs=4, num_minibatches=4, hidden_sizes=(64, 64), activation="tanh", learning_rate=2.5e-4,
                agent_id=False)


def main(argv=None) -> int:
    return run_experiment(IPPOConfig, DEFAULTS, argv, description=__doc__, name="ippo_mpe")


if __name__ == "__main__":
    sys.exit(main())
