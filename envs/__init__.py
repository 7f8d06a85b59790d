"""Pure-JAX environments bundled with rljax.

>>> import envs
>>> env, params = envs.make("CartPole-v1")
>>> env, params = envs.make("gymnax/Breakout-MinAtar")   # any gymnax >= 1.0 environment, unwrapped
>>> envs.registered()                                      # rljax's own names

Built-in: CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0 (dynamics
exact to Gymnasium's), the MinAtar games with boolean observation planes (:mod:`envs.minatar`,
gymnax's dynamics), the two-player board games of :mod:`envs.board_games` (TicTacToe-v0,
ConnectFour-v0), the memory task of :mod:`envs.memory` (MemoryCue-v0, MemoryCueContinuous-v0)
and the probe environments of :mod:`envs.probes`. They register in the
library's registry (:mod:`rljax.core.registry`); ``make``, ``register`` and ``registered`` here are
that registry's functions. The imports below are relative, so the package works whatever name it is
imported under (the library loads it by location, so a user's own ``envs`` package cannot hide it).
"""

from __future__ import annotations

import functools

from rljax.core.registry import GYMNAX_PREFIX, gymnax_registered, make, register, register_builtin, registered

from .acrobot import Acrobot
from .board_games import ConnectFour, TicTacToe
from .cartpole import CartPole
from .memory import MemoryCue
from .minatar import GAMES as MINATAR_GAMES, MinAtar
from .mountain_car import MountainCar, MountainCarContinuous
from .pendulum import Pendulum
from .probes import PROBE_KINDS, ProbeEnv, ProbeLegalActions

__all__ = ["GYMNAX_PREFIX", "make", "register", "registered", "gymnax_registered"]

for _name, _factory in {
    "CartPole-v1": CartPole,
    "Pendulum-v1": Pendulum,
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
}.items():
    register_builtin(_name, _factory)
register_builtin("MemoryCue-v0", MemoryCue)
register_builtin("MemoryCueContinuous-v0", functools.partial(MemoryCue, continuous=True))
for _game in MINATAR_GAMES:
    register_builtin(f"{_game}-MinAtar", functools.partial(MinAtar, _game))
for _kind in PROBE_KINDS:
    register_builtin(f"Probe{_kind}-v0", functools.partial(ProbeEnv, _kind, continuous=False))
    register_builtin(f"Probe{_kind}Continuous-v0", functools.partial(ProbeEnv, _kind, continuous=True))
register_builtin("ProbeLegalActions-v0", ProbeLegalActions)
register_builtin("TicTacToe-v0", TicTacToe)
register_builtin("ConnectFour-v0", ConnectFour)
