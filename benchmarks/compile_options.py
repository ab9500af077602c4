"""Compile time and run time of grepvi's step programs under XLA CPU compiler options.

Each (program, options) pair is compiled in a fresh subprocess (no in-process caches), then
run repeatedly; the table gives compile wall/CPU seconds and the median run time. Programs:

* ``window:<model>``: the default procedure's window (100 steps of the first candidate of
  :func:`grepvi.inference.fitting.setup`) on any model of ``textbook_models.ALL_MODELS``
  (through ``from_numpyro``), or ``window:gamma`` (a one-element
  gamma-Poisson written as a plain log density);
* ``def``: ten G-REP steps of the sparse gamma DEF of Olivetti's size (the CLI's fixed
  Eq. 9 schedule, ``lax.scan``), on the Olivetti faces when ``GREPVI_DATA_DIR`` holds them.

    python benchmarks/compile_options.py --programs window:gamma window:mendel def
    python benchmarks/compile_options.py --programs window:negative_binomial \
        window:hierarchical_logistic --options small small-fusion-emitters
    python benchmarks/compile_options.py --programs window:pumps --options small small-xla-no-unroll

The ``small-*`` sets of the seventy-sixth session set XLA's backend extra options (XLA's CPU
switches, and LLVM's command-line flags for keys without the ``xla_`` prefix) through
:mod:`grepvi.inference.xla_extra_options`; the ``whole-O*`` sets emit a small window as one
kernel where ``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`` keeps its dots out of
YNNPACK (``docs/performance.md``).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from grepvi.inference.xla_extra_options import extra_options  # noqa: E402

_SMALL = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 2}
OPTION_SETS = {
    "default": {},
    "legacy-emitters": {"xla_cpu_use_fusion_emitters": False},
    "legacy-emitters-O2": {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 2},
    "O1": {"xla_backend_optimization_level": 1},
    "O0": {"xla_backend_optimization_level": 0},
    "legacy-emitters-O1": {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1},
    "legacy-emitters-O0": {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0},
    "small": {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 2},
    # compilation_cache.DATA_BOUND_COMPILER_OPTIONS: a negative-binomial and a beta
    # regression's steps 2.2 and 1.5 times faster, pumps' 7% slower (docs/performance.md)
    "small-fusion-emitters": {"xla_cpu_use_fusion_emitters": True, "xla_backend_optimization_level": 2},
    "small-split2": {
        "xla_cpu_use_fusion_emitters": False,
        "xla_backend_optimization_level": 2,
        "xla_cpu_parallel_codegen_split_count": 2,
    },
    "small-cheap-llvm": {
        "xla_cpu_use_fusion_emitters": False,
        "xla_backend_optimization_level": 2,
        "xla_llvm_disable_expensive_passes": True,
    },
    "O1-cheap-llvm": {
        "xla_cpu_use_fusion_emitters": False,
        "xla_backend_optimization_level": 1,
        "xla_llvm_disable_expensive_passes": True,
    },
    "O0-cheap-llvm": {
        "xla_cpu_use_fusion_emitters": False,
        "xla_backend_optimization_level": 0,
        "xla_llvm_disable_expensive_passes": True,
    },
    # seventy-fifth session: while loops of at most N bytes accessed emitted as one kernel each
    # (grepvi.inference.xla_extra_options; the step's options where a model has a scan)
    "small-loops-3e5": {
        "xla_cpu_use_fusion_emitters": False,
        "xla_backend_optimization_level": 2,
        **extra_options({"xla_cpu_small_while_loop_byte_threshold": "300000"}),
    },
    "small-loops-3e6": {
        "xla_cpu_use_fusion_emitters": False,
        "xla_backend_optimization_level": 2,
        **extra_options({"xla_cpu_small_while_loop_byte_threshold": "3000000"}),
    },
    # seventy-sixth session (docs/performance.md): LLVM's own command-line options, per
    # compilation (extra-option keys without the xla_ prefix are handed to LLVM; an unknown
    # one ends the process), and XLA's CPU options that live in the extra options
    "small-fast-isel": {**_SMALL, **extra_options({"-fast-isel": "true"})},
    "small-regalloc-fast": {**_SMALL, **extra_options({"-regalloc": "fast"})},
    "small-no-sched": {
        **_SMALL,
        **extra_options({"-enable-misched": "false", "-enable-post-misched": "false"}),
    },
    "small-no-unroll": {**_SMALL, **extra_options({"-unroll-threshold": "0"})},
    "small-xla-no-unroll": {**_SMALL, **extra_options({"xla_cpu_disable_loop_unrolling": "true"})},
    "small-xla-no-slp": {**_SMALL, **extra_options({"xla_cpu_disable_slp_vectorizer": "true"})},
    "small-xla-size": {**_SMALL, **extra_options({"xla_cpu_optimize_for_size": "true"})},
    "small-multi-output": {**_SMALL, **extra_options({"xla_cpu_use_multi_output_fusion": "true"})},
    "small-flatten": {**_SMALL, **extra_options({"xla_cpu_flatten_after_fusion": "true"})},
    "small-fold-constants": {**_SMALL, **extra_options({"xla_cpu_fold_all_constants": "true"})},
    "small-sse4": {**_SMALL, "xla_cpu_max_isa": "SSE4_2"},
    # the whole window one kernel (with XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type= so
    # that no dot is a YNNPACK fusion), LLVM at -O0, -O1, -O2
    **{
        f"whole-O{level}": {
            "xla_cpu_use_fusion_emitters": False,
            "xla_backend_optimization_level": level,
            **extra_options({"xla_cpu_small_while_loop_byte_threshold": "1000000000"}),
        }
        for level in (0, 1, 2)
    },
}


def _program(name):
    """``(function, args, iterations per call)`` of a program (the function is jitted)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import grepvi
    from grepvi.estimators.base import get_estimator
    from grepvi.inference import fitting
    from grepvi.inference.state import init, make_target, step

    estimator = get_estimator("grep")
    if name.startswith("window:"):
        model = name.split(":", 1)[1]
        if model == "gamma":
            counts = jnp.array([3.0, 5.0, 4.0])

            def logdensity_fn(z):
                rate = z["rate"]
                return jnp.log(rate) - rate + jnp.sum(counts * jnp.log(rate) - rate)

            target, data = make_target(logdensity_fn, {"rate": grepvi.Gamma()}), None
        else:
            sys.path.insert(0, str(HERE))
            from textbook_models import ALL_MODELS

            from grepvi.interop.numpyro_model import from_numpyro

            entry = ALL_MODELS[model]
            adapted = from_numpyro(entry.model, *entry.args)
            target, data = adapted.target(), adapted.data
        target = target._replace(families=estimator.adapt_families(target.families))
        prepared = fitting.setup(target, estimator, data=data)  # the default procedure's one window
        window = prepared.window
        # setup compiles the window in the background with the step's own options: let it end,
        # or the compilation timed here shares the cores with it (seventy-third session: a
        # data-bound window's timing under other options was doubled that way)
        while window.compiling():
            time.sleep(0.05)
        jax.clear_caches()  # and its program is not the one timed
        return window.jitted, (prepared.initial.loop, data, np.int32(window.length)), window.length
    if name == "def":
        from grepvi.models import sparse_gamma_def
        from grepvi.optim.advi import advi_stepsize

        data = None
        directory = os.environ.get("GREPVI_DATA_DIR")
        if directory and Path(directory, "olivetti_faces.npz").exists():
            from grepvi.data import load_dataset

            data = np.asarray(load_dataset("olivetti", directory).train)
        if data is None:
            data = np.random.default_rng(0).poisson(3.0, (320, 4096)).astype(np.float32)
        model = sparse_gamma_def(data)
        target = model.target()
        target = target._replace(families=estimator.adapt_families(target.families))
        optimizer = advi_stepsize(0.5)

        def chunk(state, data):
            body = lambda s, _: step(s, target, estimator, optimizer, data)  # noqa: E731
            return jax.lax.scan(body, state, None, length=10)

        state = init(jax.random.key(0), target, optimizer)
        return jax.jit(chunk), (state, model.data), 10
    raise SystemExit(f"unknown program {name!r}")


def _worker(name, option_set, repeats):
    import jax
    import numpy as np

    function, args, iterations = _program(name)
    lowered = function.lower(*args)
    options = OPTION_SETS[option_set]
    wall, cpu = time.perf_counter(), time.process_time()
    compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append((time.perf_counter() - start) / iterations)
    print(json.dumps({"compile_wall": wall, "compile_cpu": cpu, "step": float(np.median(times))}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", nargs="+", default=["window:gamma", "window:mendel", "def"])
    parser.add_argument("--options", nargs="+", default=list(OPTION_SETS), choices=list(OPTION_SETS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(*args.worker, args.repeats)
        return
    print(f"{'program':<20} {'options':<20} {'compile s':>9} {'cpu s':>6} {'per step ms':>11}")
    for program in args.programs:
        for option_set in args.options:
            command = [sys.executable, __file__, "--worker", program, option_set]
            command += ["--repeats", str(args.repeats)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                print(f"{program:<20} {option_set:<20} failed: {done.stderr[-500:]}")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{program:<20} {option_set:<20} {row['compile_wall']:>9.2f} {row['compile_cpu']:>6.2f} "
                f"{1e3 * row['step']:>11.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
