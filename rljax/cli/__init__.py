"""Layer 6, the command line: ``rljax`` and its subcommands, and the experiment modules' runner.

The top of the stack: may import every layer. Nothing below imports it.
"""
