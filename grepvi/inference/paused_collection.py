"""Python's cyclic garbage collector paused while a fit traces and lowers its programs.

Tracing a step (:func:`grepvi.inference.state.traced_once`) and lowering a window to MLIR
allocate hundreds of thousands of short-lived objects (tracers, equations, MLIR operations);
each allocation counts towards the collector's thresholds, and after ``import jax`` the
oldest generation holds millions of objects, so the full collections these allocations set
off walk the whole heap again and again. Measured on the Weibull regression of the textbook
models (2 cores, fresh process, ``cProfile``): the window's lowering spent half its 0.30 s in
collections (charged to JAX's ``var_to_tracer``, where the tracers are allocated), and the
first trace of the step a fifth of its 0.45 s.

The collector is paused, not tuned: :func:`paused_collection` disables it for the block and
enables it again when the outermost block ends (only if it was enabled when that block began:
a process that turned it off keeps it off). Nothing is freed later than it would be by the
next collection after the block: the objects that die inside are mostly freed by reference
counting as they die; the cycles among them wait for the first collection after it. Blocks
may nest and may run on several threads at once (a Hessian traced on its own thread while
the main thread lowers the window): a count under a lock, not a flag per block.

The same measure is common where Python builds large graphs at once (CPython's own
``gc.freeze`` after imports; frameworks that disable collection while they import or trace);
a library cannot freeze the user's heap, so it pauses only around its own tracing.
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
