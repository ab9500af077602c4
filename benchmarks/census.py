"""The census: one default fit of every benchmark model, recorded, and two censuses compared.

A change to the default procedure (the controller, a rule, an estimator's default) is checked
against every model the project has written before it lands: which fits stop for another
reason, take other iterations or land elsewhere. ``run`` fits each model of the census with
``from_numpyro(model, *data).fit(seed=S)`` (the defaults) one after another in this process
and appends a JSON line per model: the reason, iterations, converged, the tolerance the run
used and the accuracy it reached (``result.convergence``: a widened tolerance shows), seconds,
and every latent's posterior mean and standard deviation. ``compare`` reads two such files and
lists the models whose reason or iterations differ, or whose means moved more than ``--atol``
of their sd (and the tolerance where both record it and it changed)::

    python benchmarks/census.py run --out /tmp/base.jsonl --shard 0/2 &   # one core each:
    python benchmarks/census.py run --out /tmp/base.jsonl --shard 1/2     #   taskset -c 0 / 1
    python benchmarks/census.py compare /tmp/base.jsonl /tmp/new.jsonl

(``--shard i/n`` writes ``OUT`` with ``.i`` before its suffix; ``compare`` reads every shard of
a name given without one.) The census is :data:`textbook_models.ALL_MODELS` but for the sets
whose fits take minutes (``LARGER_MODELS``, ``scale_models``, ``medium_models``) and the
moving-support set (fits the adapter refused before the sixty-seventh session): 202 models
in the sixty-seventh session. Until then the censuses of the session notes ("the 199 census
models") ran from lists kept outside the repository.
"""

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def census_models() -> list[str]:
    """The census's model names, in ``ALL_MODELS``' order."""
    sys.path.insert(0, str(HERE))
    import textbook_models  # first: it imports the sets below, which import it back
    from medium_models import MEDIUM_MODELS
    from moving_support_models import MOVING_MODELS
    from scale_models import SCALE_MODELS

    left_out = {*textbook_models.LARGER_MODELS, *SCALE_MODELS, *MEDIUM_MODELS, *MOVING_MODELS}
    return [name for name in textbook_models.ALL_MODELS if name not in left_out]


def _shard_path(out: Path, index: int) -> Path:
    return out.with_name(f"{out.stem}.{index}{out.suffix}")


def fit_record(name: str, seed: int) -> dict:
    """One default fit of model ``name``: its record (or the error it raised)."""
    import jax
    import numpy as np
    from textbook_models import ALL_MODELS

    from grepvi.interop.numpyro_model import from_numpyro

    entry = ALL_MODELS[name]
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adapted = from_numpyro(entry.model, *(jax.numpy.asarray(a) for a in entry.args))
            result = adapted.fit(progress=False, seed=seed)
    except Exception as error:  # noqa: BLE001 - one model's failure is a census entry
        return {"model": name, "seed": seed, "error": f"{type(error).__name__}: {str(error)[:200]}"}
    c = result.convergence
    as_list = lambda x: np.asarray(x, np.float64).ravel().tolist()  # noqa: E731
    return {
        "model": name,
        "seed": seed,
        "reason": c.reason,
        "converged": bool(c.converged),
        "iterations": int(c.num_iterations),
        "tolerance": float(c.tolerance),
        "accuracy": float(c.accuracy),
        "seconds": time.perf_counter() - start,
        "mean": {k: as_list(p.mean()) for k, p in sorted(result.posterior.items())},
        "sd": {k: as_list(np.sqrt(p.variance())) for k, p in sorted(result.posterior.items())},
    }


def run(out: Path, seed: int, models: list[str], shard: str | None) -> None:
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        models = models[index::count]
        out = _shard_path(out, index)
    done = set()
    if out.exists():  # a census that stopped goes on where it was
        done = {json.loads(line)["model"] for line in out.read_text().splitlines() if line.strip()}
    with out.open("a") as sink:
        for name in models:
            if name in done:
                continue
            record = fit_record(name, seed)
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            print(name, record.get("reason", record.get("error")), record.get("iterations", ""), flush=True)


def read(path: Path) -> dict:
    paths = [path] if path.exists() else sorted(path.parent.glob(f"{path.stem}.*{path.suffix}"))
    if not paths:
        raise SystemExit(f"{path}: no census there (nor shards {path.stem}.N{path.suffix})")
    records = {}
    for part in paths:
        for line in part.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                records[record["model"]] = record
    return records


def largest_move(a: dict, b: dict) -> float:
    """The largest change of a posterior mean between two records, in the first one's sd."""
    moves = [0.0]
    for name, means in a.get("mean", {}).items():
        other, sds = b.get("mean", {}).get(name), a["sd"][name]
        if other is None or len(other) != len(means):
            return math.inf
        moves += [abs(x - y) / s if s > 0 else abs(x - y) for x, y, s in zip(means, other, sds, strict=True)]
    return max(moves)


def compare(first: Path, second: Path, atol: float) -> int:
    a, b = read(first), read(second)
    common = [name for name in a if name in b]
    differ = []
    for name in common:
        x, y = a[name], b[name]
        if "error" in x or "error" in y:
            if x.get("error") != y.get("error"):
                before, after = x.get("error", x.get("reason")), y.get("error", y.get("reason"))
                differ.append(f"{name}: {before} -> {after}")
            continue
        move = largest_move(x, y)
        if x["reason"] != y["reason"] or x["iterations"] != y["iterations"] or move > atol:
            tolerances = (x.get("tolerance"), y.get("tolerance"))
            tolerance = ""
            if None not in tolerances and tolerances[0] != tolerances[1]:
                tolerance = f"; tolerance {tolerances[0]:.3g} -> {tolerances[1]:.3g}"
            differ.append(
                f"{name}: {x['reason']} {x['iterations']:,} -> {y['reason']} {y['iterations']:,}, "
                f"largest mean move {move:.3g} sd; {x['seconds']:.1f} -> {y['seconds']:.1f} s{tolerance}"
            )
    only = sorted(set(a) ^ set(b))
    same = len(common) - len(differ)
    print(f"{same} of {len(common)} models the same (reason, iterations, means within {atol:g} sd)")
    for line in differ:
        print("  " + line)
    if only:
        print(f"  in one census only: {', '.join(only)}")
    print(
        f"  seconds in all: {sum(a[n].get('seconds', 0.0) for n in common):.0f} -> "
        f"{sum(b[n].get('seconds', 0.0) for n in common):.0f}"
    )
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ran = commands.add_parser("run", help="fit every census model and record it")
    ran.add_argument("--out", type=Path, required=True)
    ran.add_argument("--seed", type=int, default=0)
    ran.add_argument("--models", nargs="+", help="default: the census (census_models())")
    ran.add_argument("--shard", help="i/n: every n-th model from the i-th (one process per core)")
    compared = commands.add_parser("compare", help="two censuses: what moved")
    compared.add_argument("first", type=Path)
    compared.add_argument("second", type=Path)
    compared.add_argument("--atol", type=float, default=1e-4, help="a mean's move counted, in its sd")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if args.command == "run":
        run(args.out, args.seed, args.models or census_models(), args.shard)
        return 0
    return compare(args.first, args.second, args.atol)


if __name__ == "__main__":
    sys.exit(main())
