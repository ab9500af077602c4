"""Python's cyclic garbage collector paused while a fit traces and lowers its programs.

Tracing a step (:func:`grepvi.inference.state.traced_once`) and lowering a window to MLIR
allocate hundreds of thousands of short-lived objects (tracers, equations, MLIR operations);
each allocation counts towards the collector's thresholds, and a full collection walks
every tracked object (about 140,000 after importing JAX, NumPyro and grepvi, more as the
traces pile up). Counted with ``gc.callbacks`` over a whole default fit of a textbook model,
without the pause: 117-282 young collections, 11-26 middle ones and 1-2 full ones, 0.10-0.27 s
in all (pumps 0.10, Weibull 0.25-0.27, rat tumours 0.24, the horseshoe 0.24); with it 4-6,
0-1 and none, 0.02-0.07 s. Under ``cProfile`` the Weibull regression's window lowering spent
half its 0.30 s in collections (charged to JAX's ``var_to_tracer``, where the tracers are
allocated). Paused, the step's and the window program's traces took 0.07-0.25 s less on each
of ten textbook models (fresh processes, two rounds; ``docs/performance.md``).

The collector is paused, not tuned: :func:`paused_collection` disables it for the block and
enables it again when the outermost block ends (only if it was enabled when that block began:
a process that turned it off keeps it off). Nothing is freed later than it would be by the
next collection after the block: the objects that die inside are mostly freed by reference
counting as they die; the cycles among them wait for the first collection after it. Blocks
may nest and may run on several threads at once: a count under a lock, not a flag per
block. The library pauses it only on the thread that returns the fit: the coupling's Hessian,
traced on a thread of its own, may outlive a fit stopped early (seventy-fifth session: such
a thread, paused, left the collector off after `fit` returned).

A process of its own could instead ``gc.freeze()`` the heap after its imports (every object
moved to a generation that is never collected); a library cannot do that to its user's
process, so it pauses collection only around its own tracing.
"""

import contextlib
import gc
import threading

__all__ = ["paused_collection"]

_lock = threading.Lock()
_depth = 0
_restore = False  # whether the outermost block found the collector enabled


@contextlib.contextmanager
def paused_collection():
    """A block (or, as a decorator, a function) during which the cyclic garbage collector does
    not run (module docstring)."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()
