"""The numbers of Ruiz, Titsias & Blei (2016) that grepvi compares itself with, in one place.

* ``PAPER["eta"]``: Table 1 (left), the ``eta`` of Eq. 9 that gave the best ELBO;
* ``PAPER["time_per_iteration"]``: Table 1 (right), seconds per iteration;
* ``PAPER["test_loglik"]``: Figure 2b, the held-out log-likelihood per entry.

Keys are ``(dataset, estimator)``.
"""

__all__ = ["PAPER", "PAPER_ETA", "ETA_GRID"]

ETA_GRID = (0.1, 0.5, 1.0, 5.0)  # the paper's grid of eta (Section 5)

PAPER = {
    "test_loglik": {
        ("olivetti", "grep"): "-4.48 ± 0.01",
        ("olivetti", "bbvi"): "-9.74 ± 0.08",
        ("olivetti", "advi"): "-4.63 ± 0.01",
        ("mnist", "grep"): "-0.0932 ± 0.0004",
        ("mnist", "bbvi"): "-0.0888 ± 0.0004",
        ("mnist", "advi"): "-0.189 ± 0.009",
        ("omniglot", "grep"): "-0.0472 ± 0.0001",
        ("omniglot", "advi"): "-0.0823 ± 0.0009",
    },
    "time_per_iteration": {
        ("olivetti", "grep"): 0.46,
        ("olivetti", "bbvi"): 12.90,
        ("olivetti", "advi"): 0.17,
        ("nips", "grep"): 0.83,
        ("nips", "bbvi"): 20.95,
        ("nips", "advi"): 0.25,
        ("mnist", "grep"): 1.09,
        ("mnist", "bbvi"): 25.99,
        ("mnist", "advi"): 0.34,
        ("omniglot", "grep"): 5.50,
        ("omniglot", "advi"): 4.10,
    },
    "eta": {
        ("olivetti", "grep"): 5,
        ("olivetti", "bbvi"): 1,
        ("olivetti", "advi"): 0.1,
        ("nips", "grep"): 0.5,
        ("nips", "bbvi"): 5,
        ("nips", "advi"): 1,
        ("mnist", "grep"): 5,
        ("mnist", "bbvi"): 5,
        ("mnist", "advi"): 0.1,
        ("omniglot", "grep"): 5,
        ("omniglot", "advi"): 0.1,
    },
}

PAPER_ETA = {key: float(value) for key, value in PAPER["eta"].items()}
