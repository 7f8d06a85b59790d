"""What the host loop runs at chunk boundaries: health checks, observability, the stall watchdog, PBT.

Part of the training layer: may import what :mod:`rljax.training` may, except the loop itself
(hooks are called by the loop, never the other way round).
"""
