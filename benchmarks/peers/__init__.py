"""The sparse gamma DEF in peer libraries (Pyro, NumPyro), for ``benchmarks/bench_def_peers.py``.

Each module exposes ``make_step(data, layer_sizes, seed) -> step`` where ``step()`` runs one
SVI iteration (one Monte Carlo sample, ``Trace_ELBO``) and returns once it has finished.
"""
