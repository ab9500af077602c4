"""The ``grepvi`` command: ``fit``, ``compare``, ``samples``, ``demo``, ``report``.

Examples::

    grepvi fit --model sparse-gamma-def --dataset olivetti --estimator grep \\
        --time-budget 300 --out runs/olivetti-grep
    grepvi compare --model beta-gamma-mf --dataset mnist --estimators grep,advi,bbvi \\
        --eta-search --time-budget 300 --out runs/mnist
    grepvi demo --out runs/demo
    grepvi report runs/olivetti-grep runs/olivetti-advi --out runs/report

Exit codes: 0 success; 2 a refused input (the message is printed, no traceback, and the output
folder is left as it was), an output folder that is not a grepvi run, is in use by another
grepvi process or holds a damaged checkpoint, or a failed write during the run (the message
says which file and how to go on); 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM, after
writing a checkpoint and the metrics so far (continue with the same command and ``--resume``).
A second signal stops at once (the last checkpoint is kept); signals while grepvi shuts down
are ignored.
"""

import argparse
import signal
import sys
from pathlib import Path

from grepvi.errors import GrepviError

__all__ = ["main", "build_parser"]

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class _Terminated(KeyboardInterrupt):
    """SIGTERM outside the training loop (which turns it into a checkpoint and a clean stop)."""

    def __init__(self, signal_number):
        super().__init__(signal_number)
        self.signal_number = signal_number


def _on_sigterm(signum, frame):
    raise _Terminated(signum)


def _quiet_shutdown() -> None:
    """Signals after the run stopped are ignored: no traceback from interpreter shutdown
    ("Exception ignored in atexit callback ... KeyboardInterrupt")."""
    for number in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(number, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread
            pass


def _integer(text):
    """argparse type: an integer, with a message saying what was expected and found."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None


def _batch_size(text):
    """argparse type of --batch-size: a positive integer, "auto" or "all"."""
    if text.strip().lower() in ("auto", "all"):
        return text.strip().lower()
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, 'auto' or 'all', found {text!r}") from None


def _number(text):
    """argparse type: a number, with a message saying what was expected and found."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None


def _enable_compilation_cache() -> None:
    """JAX's persistent compilation cache for the command's programs
    (:func:`grepvi.inference.compilation_cache.enable_persistent_cache`; ``GREPVI_COMPILATION_CACHE=0``
    disables it); without a writable cache folder every run compiles."""
    from grepvi.errors import ConfigError
    from grepvi.inference.compilation_cache import enable_persistent_cache

    try:
        enable_persistent_cache()
    except ConfigError:
        pass


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers like 100,40,15, found {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _floats(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers like 0.1,0.5,1,5, found {text!r}"
        ) from None


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with code 2 (argparse's own convention) and a one-line message."""

    def error(self, message):
        self.print_usage(sys.stderr)
        raise SystemExit(_usage_exit(f"{self.prog}: error: {message}"))


def _usage_exit(message: str) -> int:
    print(message, file=sys.stderr)
    return EXIT_ERROR


def _add_run_options(parser, *, estimator: bool = True, required_model: bool = True):
    from grepvi.experiments.run import MODELS

    group = parser.add_argument_group("model and data")
    group.add_argument("--model", required=required_model, help=f"one of {', '.join(MODELS)}")
    group.add_argument(
        "--dataset",
        required=required_model,
        help="olivetti, nips, mnist, omniglot, synthetic (simulated from the model), or a data file",
    )
    group.add_argument("--data-dir", help="folder of the data files (default: $GREPVI_DATA_DIR)")
    group.add_argument(
        "--synthetic-size",
        type=_sizes,
        default=(100, 25, 64),
        metavar="NTRAIN,NTEST,D",
        help="rows and columns of --dataset synthetic (default 100,25,64)",
    )
    group.add_argument(
        "--alphabets",
        metavar="NAMES",
        help="omniglot: 'all' (32,460 images) or comma-separated alphabet names "
        "(default: the paper's ten, 4,425 training images)",
    )
    group.add_argument(
        "--layer-sizes", type=_sizes, default=(100, 40, 15), help="sparse gamma DEF (default 100,40,15)"
    )
    group.add_argument(
        "--num-factors", type=_integer, default=100, help="beta-gamma MF factors K (default 100)"
    )
    group = parser.add_argument_group("inference")
    if estimator:
        group.add_argument("--estimator", default="grep", help="grep (default), bbvi, advi, implicit or rsvi")
    group.add_argument(
        "--time-budget",
        type=_number,
        metavar="S",
        help="cap on wall time in seconds from the start of training, compilation and the trial "
        "included, held-out evaluation excluded (both procedures)",
    )
    group.add_argument("--num-steps", type=_integer, metavar="N", help="cap on iterations (default 200,000)")
    group.add_argument(
        "--step-size",
        type=_number,
        metavar="ETA",
        help="run the paper's step-size sequence (Eq. 9) with this eta for exactly --num-steps or "
        "--time-budget; default: grepvi's procedure (natural-gradient or Adam steps chosen by a "
        "trial, averaged, stopped when converged)",
    )
    group.add_argument(
        "--tolerance",
        type=_number,
        metavar="SD",
        help="accuracy at which the default procedure stops, in posterior standard deviations "
        "(default: 0.005 up to 64 latent elements, 0.02 from 1,024; from 16 elements widened "
        "by the first stage's measured noise, up to 0.02)",
    )
    group.add_argument(
        "--num-samples", type=_integer, metavar="S", help="draws per gradient (default: 1; BBVI 30)"
    )
    group.add_argument(
        "--elbo-samples",
        type=_integer,
        metavar="S",
        help="draws of the reported ELBO (default: 20 for ADVI, else 1)",
    )
    group.add_argument(
        "--elbo-every",
        type=_integer,
        default=1,
        metavar="N",
        help="evaluate that ELBO every N iterations (1, or a multiple of --chunk-size)",
    )
    group.add_argument("--seed", type=_integer, default=0)
    group = parser.add_argument_group("evaluation and output")
    group.add_argument(
        "--eval-samples", type=_integer, default=100, help="posterior draws of the test log-likelihood"
    )
    group.add_argument(
        "--refit-steps",
        type=_integer,
        default=2000,
        help="iterations fitting the test rows' local latents (default 2000)",
    )
    group.add_argument(
        "--refit-estimator",
        metavar="NAME",
        help="estimator of that refit (default: the run's; G-REP for BBVI)",
    )
    group.add_argument(
        "--refit-step-size", type=_number, metavar="ETA", help="eta of that refit (default: --step-size)"
    )
    group.add_argument(
        "--chunk-size",
        type=_integer,
        default=None,
        help="iterations per compiled window, both procedures (default 10 with --step-size, else 100)",
    )
    group.add_argument(
        "--batch-size",
        type=_batch_size,
        default="auto",
        metavar="B",
        help="minibatch VI: B rows of the data per step, both procedures; 'all' every row; "
        "default 'auto': every row unless a full-data step is large (then a batch sized by its cost)",
    )
    group.add_argument(
        "--data-parallel",
        action="store_true",
        help="split the data's rows and the local latents over every device (one device: no change)",
    )
    group.add_argument(
        "--checkpoint-every", type=_integer, default=0, metavar="N", help="checkpoint every N iterations"
    )
    group.add_argument(
        "--checkpoint-seconds",
        type=_number,
        default=60.0,
        metavar="S",
        help="checkpoint every S seconds (default 60)",
    )
    group.add_argument("--out", required=True, help="output folder")
    exclusive = group.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its checkpoint"
    )
    exclusive.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    group.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="grepvi",
        description="Variational inference with generalized reparameterization gradients "
        "(Ruiz, Titsias & Blei 2016): the paper's experiments.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    fit = sub.add_parser("fit", help="one run: model x data set x estimator")
    _add_run_options(fit)

    compare = sub.add_parser(
        "compare", help="several estimators on one model and data set, with tables and figures"
    )
    _add_run_options(compare, estimator=False)
    compare.add_argument(
        "--estimators", type=_names, default=["grep", "advi", "bbvi"], help="default grep,advi,bbvi"
    )
    compare.add_argument(
        "--eta-search", action="store_true", help="run every eta of --etas; keep the best final ELBO"
    )
    compare.add_argument("--etas", type=_floats, default=[0.1, 0.5, 1.0, 5.0], help="default 0.1,0.5,1,5")

    samples = sub.add_parser("samples", help="G-REP with 1, 2, 5, 10, 20 samples: ELBO and gradient variance")
    _add_run_options(samples, estimator=False)
    samples.add_argument("--estimator", default="grep")
    samples.add_argument(
        "--sample-counts", type=_sizes, default=(1, 2, 5, 10, 20), help="default 1,2,5,10,20"
    )

    demo = sub.add_parser("demo", help="a small G-REP vs ADVI comparison on simulated data (no download)")
    demo.add_argument("--out", default="grepvi-demo", help="output folder (default ./grepvi-demo)")
    demo.add_argument(
        "--time-budget",
        type=_number,
        default=60.0,
        metavar="S",
        help="seconds of wall time per estimator (60; less if it converges first)",
    )
    demo.add_argument(
        "--estimators", type=_names, default=["grep", "advi"], help="default grep,advi; add bbvi"
    )
    demo.add_argument("--seed", type=_integer, default=0)
    demo.add_argument("--overwrite", action="store_true", help="replace an earlier demo in --out")
    demo.add_argument("--quiet", action="store_true")

    report = sub.add_parser("report", help="tables and figures of finished runs")
    report.add_argument("runs", nargs="+", help="run folders, or folders holding them")
    report.add_argument("--out", help="output folder (default: the single folder given)")
    return parser


def _config(args, estimator: str):
    from grepvi.experiments.run import RunConfig

    return RunConfig(
        model=args.model,
        dataset=args.dataset,
        estimator=estimator,
        num_steps=args.num_steps,
        time_budget=args.time_budget,
        step_size=args.step_size,
        num_samples=args.num_samples,
        elbo_samples=args.elbo_samples,
        seed=args.seed,
        data_dir=args.data_dir,
        layer_sizes=args.layer_sizes,
        num_factors=args.num_factors,
        eval_samples=args.eval_samples,
        refit_steps=args.refit_steps,
        refit_step_size=args.refit_step_size,
        tolerance=args.tolerance,
        refit_estimator=args.refit_estimator,
        chunk_size=args.chunk_size,
        batch_size=args.batch_size,
        parallel=args.data_parallel,
        elbo_every=args.elbo_every,
        synthetic_size=args.synthetic_size,
        alphabets=args.alphabets,
        checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=args.checkpoint_seconds,
    )


def _shown(value, spec: str) -> str:
    """A number of metrics.json (``null`` where it was not finite) for printing."""
    return "n/a" if value is None else format(value, spec)


def _print_metrics(metrics: dict, out) -> None:
    ll = metrics.get("test_loglik_per_entry", {})
    lines = [
        f"{metrics.get('estimator')} on {metrics.get('dataset')}: {metrics.get('iterations')} iterations, "
        f"{_shown(metrics.get('time_per_iteration_s'), '.4g')} s/iteration, eta {metrics.get('eta')}",
        f"  final ELBO (mean of the last 10%): {_shown(metrics.get('final_elbo'), '.6g')}",
    ]
    convergence = metrics.get("convergence")
    if convergence:
        state = "converged" if convergence["converged"] else f"not converged ({convergence['reason']})"
        accuracy = f"accuracy {_shown(convergence['accuracy'], '.2g')} sd"
        if convergence["accuracy"] is None and convergence.get("monte_carlo_error") is not None:
            accuracy = f"accuracy unknown (Monte Carlo error {convergence['monte_carlo_error']:.2g} sd)"
        lines.append(
            f"  {state}: {convergence['direction']} steps, {convergence['num_stages']} stage(s), "
            f"{accuracy}, "
            f"final step size {_shown(convergence['step_size'], '.3g')}"
        )
    if ll:
        lines.append(
            f"  test log-likelihood per entry: {_shown(ll['mean'], '.5g')} ± {_shown(ll['std'], '.2g')}"
        )
    if "perplexity" in metrics:
        lines.append(f"  held-out perplexity: {_shown(metrics['perplexity'], '.2f')}")
    lines.append(f"  results in {out}")
    print("\n".join(lines))


def _run(args) -> int:
    from grepvi.experiments import report, studies
    from grepvi.experiments import run as experiments

    if args.command == "fit":
        metrics = experiments.fit_run(
            _config(args, args.estimator),
            args.out,
            resume=args.resume,
            overwrite=args.overwrite,
            quiet=args.quiet,
        )
        _print_metrics(metrics, args.out)
    elif args.command == "compare":
        summary = studies.compare(
            _config(args, args.estimators[0] if args.estimators else "grep"),
            args.estimators,
            args.out,
            search_eta=args.eta_search,
            etas=args.etas,
            resume=args.resume,
            overwrite=args.overwrite,
            quiet=args.quiet,
        )
        print(summary["markdown"])
        print(f"tables and figures in {args.out}")
    elif args.command == "samples":
        config = _config(args, args.estimator)
        if config.num_steps is None and config.time_budget is None:
            config.num_steps = 200
        summary = studies.samples_sweep(
            config,
            args.sample_counts,
            args.out,
            resume=args.resume,
            overwrite=args.overwrite,
            quiet=args.quiet,
        )
        print(summary["markdown"])
    elif args.command == "demo":
        summary = studies.demo(
            args.out,
            estimators=args.estimators,
            seed=args.seed,
            time_budget=args.time_budget,
            overwrite=args.overwrite,
            quiet=args.quiet,
        )
        print(summary["markdown"])
        print("figures:")
        for figure in summary["figures"]:
            print(f"  {figure}")
    elif args.command == "report":
        out = args.out
        if out is None:
            if len(args.runs) != 1:
                raise GrepviError("report: give --out when reporting several folders")
            out = args.runs[0]
        summary = report.build_report(args.runs, out)
        print(summary["markdown"])
        print(f"tables and figures in {Path(out)}")
    return 0


def main(argv=None) -> int:
    """Entry point; returns the exit code (also when called from Python)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    _enable_compilation_cache()
    from grepvi.experiments.observers import RunInterrupted

    previous = _install(signal.SIGTERM, _on_sigterm)
    command_line = argv is None  # the process is grepvi's: it may ignore signals while it exits
    try:
        return _run(args)
    except RunInterrupted as error:
        from grepvi.experiments.config import option_flags

        if command_line:
            _quiet_shutdown()
        print(f"grepvi: {option_flags(str(error)).replace('same call', 'same command')}", file=sys.stderr)
        return 128 + error.signal_number
    except GrepviError as error:
        from grepvi.experiments.config import option_flags

        print(f"grepvi {args.command}: error: {option_flags(str(error))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt as error:
        if command_line:
            _quiet_shutdown()
        number = getattr(error, "signal_number", signal.SIGINT)
        print(
            f"grepvi: stopped by {signal.Signals(number).name}; files written so far are kept (a run with a "
            "checkpoint continues with the same command and --resume)",
            file=sys.stderr,
        )
        return 128 + number
    finally:
        if previous is not None and not (command_line and signal.getsignal(signal.SIGINT) == signal.SIG_IGN):
            _install(signal.SIGTERM, previous)


def _install(number, handler):
    """Installs a signal handler (main thread only); returns the previous one or None."""
    try:
        return signal.signal(number, handler)
    except (ValueError, OSError):
        return None


if __name__ == "__main__":
    sys.exit(main())
