"""The smallest bench spec the bench tests run: PPO on CartPole, 2 seeds, 2,048 env steps."""

SPEC = """
name = "tiny"
seeds = 2
total_timesteps = 2048
[evaluation]
episodes = 4
interval = 1
last = 2
random_episodes = 20
[algorithms.ppo]
num_steps = 64
[envs."CartPole-v1"]
reference = 500.0
citation = "the env's maximum return"
"""
"""A one-cell spec (TOML) small enough to train several times in one test module."""
