"""JAX's persistent compilation cache, under the user's cache directory.

A fit compiles its step programs once per process; with the cache on, a second process (the
next ``grepvi`` command, the next script run) reads them from disk instead of compiling
them again. The command line and ``grepvi.fit`` (``from_numpyro(...).fit()`` too) turn it on
unless the process configured one already (``jax_compilation_cache_dir``) or the environment
disables it; :func:`enable_persistent_cache` names another directory. A warm cache took a
fresh process's default fit of the pumps hierarchy from 4.15 s to 2.24-2.37 s (its first
window from 3.35 s to 1.53-1.67 s; sixty-seventh session, 2 cores).

The directory is, in order: the ``path`` argument; the environment variable
``GREPVI_COMPILATION_CACHE`` (``0``, ``off``, ``false`` or an empty value disable the cache);
``$XDG_CACHE_HOME/grepvi/jax``; ``~/.cache/grepvi/jax``.
"""

import functools
import math
import os
from pathlib import Path

import jax

from grepvi.errors import ConfigError
from grepvi.inference.xla_extra_options import extra_options

__all__ = [
    "enable_persistent_cache",
    "default_cache_dir",
    "step_compiler_options",
    "once_compiler_options",
    "hessian_compiler_options",
    "ENVIRONMENT_VARIABLE",
    "SMALL_MODEL_ELEMENTS",
]

ENVIRONMENT_VARIABLE = "GREPVI_COMPILATION_CACHE"
_DISABLED = {"0", "off", "false", "no", ""}
MIN_COMPILE_TIME_SECONDS = 0.1  # programs that compile faster than this are not written


def default_cache_dir() -> Path | None:
    """The cache directory without a ``path`` argument; ``None`` when the environment disables it."""
    override = os.environ.get(ENVIRONMENT_VARIABLE)
    if override is not None:
        if override.strip().lower() in _DISABLED:
            return None
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "grepvi" / "jax"


def enable_persistent_cache(path: str | os.PathLike | None = None) -> Path | None:
    """Turns on JAX's persistent compilation cache; returns its directory (``None``: disabled).

    Sets ``jax_compilation_cache_dir`` and writes every program that took at least
    ``MIN_COMPILE_TIME_SECONDS`` to compile (JAX's default, 1 s, would skip most of a small
    model's programs). Call it before the first compilation of the process; calling it again
    with the same directory does nothing.

    Args:
      path: the directory (created if missing); default :func:`default_cache_dir`. The
        environment variable ``GREPVI_COMPILATION_CACHE=0`` disables the cache whatever
        ``path`` is.

    Raises:
      ConfigError: ``path`` exists and is not a directory, or cannot be created.
    """
    if os.environ.get(ENVIRONMENT_VARIABLE, "x").strip().lower() in _DISABLED:
        return None
    directory = Path(path).expanduser() if path is not None else default_cache_dir()
    if directory is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"path: cannot use {str(directory)!r} as the compilation cache directory ({error}); "
            f"give a writable directory, or set {ENVIRONMENT_VARIABLE}=0 to disable the cache"
        ) from error
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory


SMALL_MODEL_ELEMENTS = 10_000  # latent elements up to which step programs compile for size
SMALL_MODEL_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 2}
LARGE_MODEL_COMPILER_OPTIONS = {"xla_backend_optimization_level": 3}
DATA_BOUND_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": True, "xla_backend_optimization_level": 2}
# A small model's step is data-bound, and compiles with XLA's fusion emitters, where it
# evaluates special functions on at least DATA_BOUND_SPECIAL_ELEMENTS elements or costs at
# least DATA_BOUND_FLOPS (jaxpr_flops), and gathers at most MAX_GATHERED_ELEMENTS elements.
DATA_BOUND_SPECIAL_ELEMENTS = 2**14
DATA_BOUND_FLOPS = 2**23
MAX_GATHERED_ELEMENTS = 2**11
# A small model's step with a scan of at least SMALL_LOOP_MIN_TRIPS trips compiles its while
# loops of at most SMALL_LOOP_BYTES bytes accessed as one kernel each (step_compiler_options).
# Of seven windows measured at 1 kB-3 MB (GARCH, a Kalman filter, an OU process, stochastic
# volatility, pumps, Mendel, rat tumours) none was emitted whole at 300 kB; at 3 MB the OU
# process's and stochastic volatility's were (compiled 1.1-2.1 s longer).
SMALL_LOOP_MIN_TRIPS = 8
SMALL_LOOP_BYTES = 300_000


def step_compiler_options(
    num_elements: int,
    backend: str | None = None,
    *,
    special_elements: int = 0,
    gathered_elements: int = 0,
    flops: float = 0.0,
    scan_trips: int = 0,
) -> dict:
    """XLA options for a step program of a model with ``num_elements`` latent elements.

    On CPU, for models up to ``SMALL_MODEL_ELEMENTS`` elements, XLA's older loop emitters and
    LLVM at ``-O2``: the compile time of a small model's step program is nearly all LLVM
    (HLO passes are 0.1 s of 2-3 s), and these options halve it at a run time per step
    within the noise (``benchmarks/compile_options.py``, 2 loaded cores, CPU seconds of the
    default procedure's window: pumps 6.0 -> 2.6, rat tumors 9.7 -> 5.3; a one-element
    gamma-Poisson 2.5 -> 1.1). Large models keep XLA's fusion emitters (the older emitters
    made a G-REP step of Olivetti's DEF 2.5 times slower, 48.8 -> 128 ms) with LLVM at
    ``-O3``, which vectorizes the gamma sampler's Threefry rounds (:mod:`grepvi.threefry`,
    fused with the arithmetic that reads them): the default procedure's window on the
    Olivetti DEF took 27.4 ms a step against 45.9 at ``-O1`` (38.4 with the sampler's
    earlier, rolled bits, the same at either level), on MNIST's MF 68.9 ms against 117
    (91.8), for about 0.9 s more compilation (``-O0``: 107 ms a step). Other backends: none.

    **A small model's data-bound step keeps the fusion emitters** (at ``-O2``), given the
    step's counts from its jaxpr (:mod:`grepvi.inference.cost`): ``special_elements``, the
    elements of special functions (``lgamma``, ``digamma``, ...: XLA expands each into a
    long polynomial; the older emitters run a fusion of several of them at a third of the
    speed), at least ``DATA_BOUND_SPECIAL_ELEMENTS``; or ``flops`` at least
    ``DATA_BOUND_FLOPS``; and in either case ``gathered_elements`` (the fusion emitters'
    gathers ran 18 times slower: 10,000 rows of 200 group effects, 128 against 7 us) at most
    ``MAX_GATHERED_ELEMENTS``. Whole default fits, one process each (``benchmarks/
    time_to_answer.py``, contender ``grepvi-fusion-emitters``): a negative-binomial regression
    of 500 rows (32,103 special elements a step) 14.69 -> 11.81 s, a beta regression of 200
    rows (73,094) 12.02 -> 11.27 s, a logistic regression of 100,000 rows (16.9 MFLOP a step)
    12.34 -> 10.30 s; with the fusion emitters everywhere the other models lost their 0.5-1.9
    s more compilation, and more where they gather (a varying-intercept logistic regression
    of 10,000 rows, 30,001 gathered elements: 6.20 -> 8.14 s). Of the 36 small textbook
    models only those two have more than 5,025 special elements a step (``docs/performance.md``).

    **A small model's recursion runs as one kernel a loop**: where the step holds a ``scan``
    of at least ``SMALL_LOOP_MIN_TRIPS`` trips (``scan_trips``: a model's filter, GARCH
    variance, Euler steps), XLA's CPU backend emits every ``while`` loop of at most
    ``SMALL_LOOP_BYTES`` bytes accessed as one kernel
    (``xla_cpu_small_while_loop_byte_threshold``, 1 kB by default, set through
    :mod:`grepvi.inference.xla_extra_options`). Otherwise each trip of the model's ``scan``
    runs each of its fusions as a kernel call of its own: the loop's cost is the calls', not
    the arithmetic's. Whole default fits, fresh processes, before / after (seventy-fifth
    session, ``benchmarks/time_to_answer.py --contenders grepvi-loops-per-fusion grepvi``):
    GARCH(1, 1) of 400 returns 12.15 -> 8.48 s, a Kalman filter of 120 points 6.40 -> 4.13, a
    forward-algorithm HMM 5.92 -> 5.18, Lotka-Volterra 4.96 -> 4.44, an SIR epidemic 5.95 ->
    6.11, the same iterations. Models without a ``scan`` keep XLA's default: at this bound
    their windows compiled and stepped as before, and at 3 MB a small model's whole window
    is one kernel, its steps 2-6 times faster but compiled 1.1-2.1 s longer.

    Use: ``jax.jit(program, compiler_options=step_compiler_options(n))`` or
    ``lowered.compile(compiler_options=...)``.
    """
    backend = backend or jax.default_backend()
    if backend != "cpu":
        return {}
    if int(num_elements) > SMALL_MODEL_ELEMENTS:
        return dict(LARGE_MODEL_COMPILER_OPTIONS)
    loops = {}
    if scan_trips >= SMALL_LOOP_MIN_TRIPS:
        loops = extra_options({"xla_cpu_small_while_loop_byte_threshold": str(SMALL_LOOP_BYTES)})
    heavy = special_elements >= DATA_BOUND_SPECIAL_ELEMENTS or flops >= DATA_BOUND_FLOPS
    if heavy and gathered_elements <= MAX_GATHERED_ELEMENTS:
        return {**DATA_BOUND_COMPILER_OPTIONS, **loops}
    return {**SMALL_MODEL_COMPILER_OPTIONS, **loops}


ONCE_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}


def once_compiler_options(backend: str | None = None) -> dict | None:
    """XLA options for a program run once (a model's first evaluation, the initial state, a
    NumPyro model's shape trace): compiled for compile time, LLVM at ``-O0`` and the older
    loop emitters on CPU (a beta-binomial hierarchy's trace: 1.4-1.6 s with XLA's defaults,
    about half that here). Run eagerly instead, each primitive of such a program compiles on
    its own (20-40 ms each: 2 s for a 10-site model). Other backends: none."""
    backend = backend or jax.default_backend()
    return dict(ONCE_COMPILER_OPTIONS) if backend == "cpu" else None


# flops of the coupling's 16 Hessians (draws x covered elements x the model's value and
# gradient) up to which their program compiles at -O0
HESSIAN_FAST_COMPILE_FLOPS = 2e7


def hessian_compiler_options(
    num_elements: int, flops: float = math.inf, backend: str | None = None
) -> dict | None:
    """XLA options for the location coupling's Hessian program
    (:func:`grepvi.optim.coupling.location_hessian`), run once a stage where a run couples:
    its compilation is a pause in the run's first stage, its runs are few.

    On CPU, :func:`step_compiler_options` without the step's profile (a small model: XLA's
    older loop emitters, LLVM at ``-O2``), and :func:`once_compiler_options` (``-O0``) where
    the 16 draws' Hessians cost at most ``HESSIAN_FAST_COMPILE_FLOPS`` (``flops``: the
    model's value and gradient at one point, times the covered elements and the draws).
    With XLA's defaults the first call (compilation and 16 draws) took 1.02-1.18 s on the
    horseshoe regression, 1.07-1.44 on the SIR epidemic, 0.53-0.59 on a Hawkes process; with
    the older emitters at ``-O2`` 0.55, 0.75, 0.38, its later calls about as fast (2.3 against
    2.7-3.2 ms; 1.5 against 1.7-3.1; 7.5 against 5.2-5.7); at ``-O0`` 0.35-0.58, 0.67-0.73,
    0.30-0.36, its later calls slower by a factor that grows with the model's cost (4.6-6.1 ms;
    2.0-2.5; 44-68: the Hawkes process's Hessians cost 2.4e7 flops). Other backends: none."""
    backend = backend or jax.default_backend()
    if backend != "cpu":
        return None
    if flops <= HESSIAN_FAST_COMPILE_FLOPS:
        return dict(ONCE_COMPILER_OPTIONS)
    return step_compiler_options(num_elements, backend)


def jit_for_compile_time(function, **jit_kwargs):
    """``jax.jit(function, **jit_kwargs)`` with :func:`once_compiler_options`, for a program run
    once (a data set's simulation): built at its first call, so importing a module that
    defines one does not start JAX's backend.

    The sparse gamma DEF's simulation of the demo's 125 x 64 counts compiled in 7.2 s with the
    default options on a loaded core, in 1.8 s so; the beta-gamma MF's in 5.9 and 0.7 s."""
    program = functools.cache(
        lambda: jax.jit(function, compiler_options=once_compiler_options(), **jit_kwargs)
    )

    @functools.wraps(function)
    def call(*args, **kwargs):
        return program()(*args, **kwargs)

    return call
