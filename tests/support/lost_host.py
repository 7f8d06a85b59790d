"""A process of a job whose host can be lost for good: ``python tests/support/lost_host.py MARKER
MODULE ARGS...`` runs ``python -m MODULE ARGS...``, except that process 1 of the job
(``RLJAX_PROCESS_ID=1``) kills itself with SIGKILL at start while the file MARKER exists: every
restart of the job then loses that process again, as a job whose host is gone does. The supervisor's
shrink test of ``tests/integration/test_multihost.py`` uses it.
"""

import os
import runpy
import signal
import sys

if __name__ == "__main__":
    marker, module, *args = sys.argv[1:]
    if os.environ.get("RLJAX_PROCESS_ID") == "1" and os.path.exists(marker):
        os.kill(os.getpid(), signal.SIGKILL)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
