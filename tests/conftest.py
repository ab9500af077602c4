"""Shared test setup: JAX on the CPU, float32 unless ``GREPVI_TEST_X64=1``, numpy's global seed reset.

``GREPVI_TEST_PLATFORM=gpu pytest`` runs the suite on a GPU (``cuda``/``gpu``, as JAX names
it in ``JAX_PLATFORMS``); the CPU is the default and CI's platform.

As in numpyro's ``test/conftest.py``: ``GREPVI_TEST_X64=1 pytest`` runs the whole suite with
``jax_enable_x64`` on; tests that need float64 locally use ``jax.enable_x64(True)``.

A test's own heavy computation (a model's gradient, an estimator over many keys, a family's
draws and densities) is compiled as one program, ``jax.jit(...)``: run eagerly, each primitive
compiles on its own (20-40 ms each), and a sparse gamma DEF's float64 gradient took 36 s so
against 2 s compiled. The exception is a parametrized family whose cases share the eager
primitives' compilations (``tests/test_grep.py``'s closed-form comparison: 17 s eagerly over
four cases, 41 s jitted, one program per case).
"""

import os

os.environ["JAX_PLATFORMS"] = os.environ.get("GREPVI_TEST_PLATFORM", "cpu")  # before JAX starts
# The tests' own programs (a vmap of an estimator over 200 keys, say) are compiled once and run
# briefly: LLVM at -O0 compiles them in a third to a half of the time (test_log_space.py's
# value-space/log-space comparisons 26 -> 6 s). The fits' step programs keep the library's own
# options (grepvi.inference.compilation_cache.step_compiler_options), which name the level
# explicitly: long fits run at the speed a user gets. A user's XLA_FLAGS is left as it is.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_backend_optimization_level=0"
# One persistent compilation cache for the session's fits and CLI runs (the same small models
# compile in many tests); a fresh folder per session, so no test reads an older run's programs.
if "GREPVI_COMPILATION_CACHE" not in os.environ:
    import tempfile

    os.environ["GREPVI_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="grepvi-test-jax-cache-")

import jax  # noqa: E402
import numpy as np  # noqa: E402

if os.environ.get("GREPVI_TEST_X64", "0") == "1":
    jax.config.update("jax_enable_x64", True)


def pytest_runtest_setup(item):
    np.random.seed(0)  # noqa: NPY002 (legacy global state that some tests may still touch)
