"""What the default procedure's window program is made of, for one NumPyro model.

Traces ``from_numpyro(model, *data).fit(num_steps=1)``, takes the window program it compiles
ahead of time, and prints (1) its jaxpr's equations by the innermost grepvi or NumPyro function
that made them, (2) the calls of grepvi's jitted helpers (the special functions, ``where``) and
their argument shapes, (3) the ahead-of-time compilation's seconds and the optimized HLO's
size and fusions. Where a small model's compile time goes (``docs/performance.md``)::

    python benchmarks/window_anatomy.py dugongs
    python benchmarks/window_anatomy.py pumps --top 30

Measured in the twenty-seventh session on ``dugongs`` (4 scalar latents): 7,007 equations, of
which 4,714 (67%) in ``grepvi/numerics.py`` (44 trigamma, 38 digamma, 12 tetragamma and 12
gammaln calls, all on scalars); with those four functions replaced by one-line stand-ins the
window compiled in 7.2-8.2 s against 9.4-11.9 s (loaded machine): a fifth to a third of the
compile time, not most of it. The optimized HLO: 23,700 lines, 363 loop fusions; the step's
16-leaf finiteness test is copied into about 30 fusions (517 ``is-finite`` instructions).

``--kernels`` counts the optimized HLO's fusions by the computation that runs them: XLA's CPU
backend compiles each as an LLVM module of its own (a synthetic chain of 300 tiny ones: about
10 ms apiece). Pumps in the sixty-ninth session: 187, of which 86 in the window's step outside
the repeats' loop, 39 in that loop (the draws' part of one estimate), 23 and 14 in the natural
and Adam rules' branches, 18 outside the loops. The count is not the compile time: in the
seventieth session 12 fewer (the guard as one conditional, 185 -> 173) compiled no faster
(1.58-1.59 s against 1.58-1.66).
"""

import argparse
import collections
import os
import re
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _frames(eqn):
    traceback = eqn.source_info.traceback
    if traceback is None:
        return []
    out = []
    for frame in traceback.frames:
        name = frame.file_name
        if "/grepvi/" in name or "/numpyro/" in name or str(HERE) in name:
            out.append(
                (name.split("site-packages/")[-1].split(str(HERE.parent) + "/")[-1], frame.function_name)
            )
    return out


def _subjaxprs(eqn, core):
    for value in eqn.params.values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, core.Jaxpr):
                yield item


def kernels_by_computation(text: str) -> list:
    """``(fusions, computation, where it runs, its other operations)`` for each computation of
    an optimized HLO module that calls fusions, most first; where it runs: the body of a while
    loop or a conditional's branch in which computation (XLA renames the loops' bodies, so
    read the nesting, not the names). On XLA's CPU backend every fusion is a kernel of its
    own, compiled by LLVM in a module of its own: a loop body's fusions are the kernels of one
    trip (the window's step, the repeats' estimate inside it, a rule's branch)."""
    blocks = {}
    for block in re.split(r"\n(?=\S.*\{\n)", text):
        head = block.split("\n", 1)[0]
        blocks["ENTRY" if head.startswith("ENTRY") else head.split()[0].lstrip("%")] = block
    parent = {}
    for name, block in blocks.items():
        for body in re.findall(r"\bwhile\([^)]*\), condition=%?[\w.\-]+, body=%?([\w.\-]+)", block):
            parent[body] = f"a while loop's body in {name}"
        for branches in re.findall(r"branch_computations=\{([^}]*)\}", block):
            for branch in re.findall(r"%?([\w.\-]+)", branches):
                parent[branch] = f"a conditional's branch in {name}"
    rows = []
    for name, block in blocks.items():
        if name.startswith("fused"):
            continue
        ops = collections.Counter(re.findall(r"= \S+ ([a-z][\w-]*)\(", block))
        fusions = ops.pop("fusion", 0)
        if fusions:
            others = ", ".join(f"{op} {n}" for op, n in ops.most_common(4))
            where = parent.get(name, "the entry" if name == "ENTRY" else "called")
            rows.append((fusions, name, where, others))
    return sorted(rows, reverse=True)


def main(argv=None):
    os.environ.setdefault("GREPVI_COMPILATION_CACHE", "0")
    sys.path.insert(0, str(HERE))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a name of textbook_models.ALL_MODELS")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--dump", help="write the optimized HLO of the window program to this file")
    parser.add_argument(
        "--kernels", action="store_true", help="the optimized HLO's fusions by the computation that runs them"
    )
    args = parser.parse_args(argv)

    import jax
    import jax.stages
    import numpy as np
    from jax._src import core
    from textbook_models import ALL_MODELS

    from grepvi.inference import driver, fitting
    from grepvi.interop.numpyro_model import from_numpyro

    captured, compiled = {}, []
    make_window = driver.make_window

    def recording_make_window(step_fn, length, *rest, **options):
        window = make_window(step_fn, length, *rest, **options)
        compile_ahead = window.compile

        def compile_and_record(state, data):
            captured.setdefault("window", (window, state, data))
            return compile_ahead(state, data)

        window.compile = compile_and_record
        return window

    lowered_compile = jax.stages.Lowered.compile

    def timed_compile(self, *rest, **options):
        start = time.perf_counter()
        out = lowered_compile(self, *rest, **options)
        compiled.append((time.perf_counter() - start, out))
        return out

    fitting.driver.make_window = recording_make_window
    jax.stages.Lowered.compile = timed_compile
    entry = ALL_MODELS[args.model]
    data = tuple(jax.numpy.asarray(a) for a in entry.args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_numpyro(entry.model, *data).fit(progress=False, num_steps=1)
    window, state, window_data = captured["window"]
    closed = jax.make_jaxpr(window.jitted)(state, window_data, np.int32(window.length))

    by_function, calls, shapes, total = collections.Counter(), collections.Counter(), collections.Counter(), 0

    def walk(jaxpr):
        nonlocal total
        for eqn in jaxpr.eqns:
            name = eqn.params.get("name", "")
            if eqn.primitive.name in ("pjit", "jit") and name.startswith("_"):
                outer = next((f for f in _frames(eqn) if not f[0].endswith("numerics.py")), ("?", "?"))
                calls[(name, f"{Path(outer[0]).name}:{outer[1]}")] += 1
                shapes[(name, str(eqn.invars[0].aval) if eqn.invars else "")] += 1
            inner = list(_subjaxprs(eqn, core))
            if inner:
                for sub in inner:
                    walk(sub)
                continue
            total += 1
            frames = _frames(eqn)
            by_function[f"{frames[0][0]}:{frames[0][1]}" if frames else "?"] += 1

    walk(closed.jaxpr)
    print(f"{args.model}: {total} equations in the window program")
    for key, count in by_function.most_common(args.top):
        print(f"  {count:6d}  {key}")
    print(f"calls of grepvi's jitted helpers: {sum(calls.values())}")
    for (name, caller), count in calls.most_common(args.top):
        print(f"  {count:4d}  {name:18s} <- {caller}")
    for (name, shape), count in shapes.most_common(args.top):
        print(f"  {count:4d}  {name:18s} {shape}")
    for seconds, program in compiled:
        text = program.as_text()
        fusions = collections.Counter(re.findall(r"kind=(k\w+)", text))
        lines = text.count("\n")
        print(f"compiled ahead of time in {seconds:.2f} s: {lines} lines of HLO, fusions {dict(fusions)}")
        if args.dump:
            Path(args.dump).write_text(text)
        if args.kernels:
            for count, name, where, ops in kernels_by_computation(text):
                print(f"  {count:4d} fusions in {name[:40]}: {where[:70]} ({ops})")


if __name__ == "__main__":
    main()
