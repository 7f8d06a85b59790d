"""Verification harnesses: long checks that are tests, not benchmarks, run by hand or before a release.

* :mod:`tests.verification.bit_identity`: same seeds, same bits: fingerprints every experiment
  module's run and compares two commits (the proof a refactor demands).
* :mod:`tests.verification.fault_soak`: kills real runs at random moments (SIGKILL, SIGTERM, damaged
  checkpoints) and checks each resume is bit-exact.
* :mod:`tests.verification.mutants`: plants known bugs one at a time and checks their tests catch them.

Each is ``python -m tests.verification.NAME --help``. Their short versions run in the default suite:
``tests/integration/test_fault_soak.py`` (a small soak) and ``tests/integration/test_mutants.py``
(every mutant still applies to the code and names tests that exist).
"""
