"""numpy, imported with its BLAS held to the calling thread: `from steer.model.numeric import np`.

pip's numpy wheels bundle OpenBLAS, which starts a thread per CPU (up to 64) when numpy is
imported. steer does no linear algebra, and in `steer export` those threads were made before it
gave up its privileges and kept root's capabilities (CapEff 000001fffeffffff in a task of the
exporter: tests/live/test_exporter_live.py). With one BLAS thread OpenBLAS starts none. Set, not
defaulted: a value from the environment would bring the threads back."""
import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"   # the same, for numpy builds that use OpenMP

import numpy as np  # noqa: E402  (after the environment it reads at import)

__all__ = ["np"]
