"""One process of a 2-process PPO CartPole run in which process 1 sleeps in every chunk's callback.

``python tests/support/straggler_run.py RUN_DIR SLEEP_S``, started as a process of a job
(``rljax launch`` or :func:`rljax.cli.launch.process_env`): the straggler test of
``tests/integration/test_multihost.py``. Six chunks of one update each on the job's 4 devices.
"""

import sys
import time

from rljax.runtime import distributed


def main(run_dir: str, sleep_s: float) -> None:
    distributed.initialize_from_env()
    import jax

    import rljax
    from rljax.agents.ppo import PPOConfig

    def on_chunk(chunk_index, state, row):
        if jax.process_index() == 1:
            time.sleep(sleep_s)

    config = PPOConfig(env="CartPole-v1", num_devices=4, num_envs=4, num_steps=32, num_epochs=1, num_minibatches=1,
                       hidden_sizes=(16,), total_timesteps=4 * 32 * 6, updates_per_chunk=1)
    rljax.train(config, options=rljax.RunOptions(run_dir=run_dir, tensorboard=False, checkpoints=False,
                                                 on_chunk=on_chunk, quiet=True))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
