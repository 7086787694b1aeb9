"""Imported by the fork server that forks the decoding worker processes (processes._context), and nowhere else.

The fork server ends when the process that started it does. Ended the usual way, it would first tear down the PyTorch
it imported for its children (about a second on a 2-core CPU), and until then it holds the caller's stdout and stderr
open: ``aiayn translate | tee out`` would wait for it. It has nothing to save (its children end with ``os._exit`` too,
processes._serve), so it leaves at once.
"""

import atexit
import os

atexit.register(os._exit, 0)
