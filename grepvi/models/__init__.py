"""The paper's models, and the named-axes machinery to write new ones.

* :func:`sparse_gamma_def`: the sparse gamma deep exponential family (Poisson counts).
* :func:`beta_gamma_mf`: the beta-gamma matrix factorization (binary data).
* :class:`Factor`, :func:`log_joint`: a model as a list of factors over named axes, from
  which the log joint and every latent's local log joint (Markov blanket) are built.
* :class:`Model`: a model bound to data, with default variational families, held-out
  log-likelihood, reconstructions and a simulator.
"""

from grepvi.models.beta_gamma_mf import beta_gamma_mf
from grepvi.models.factors import Factor, LogJoint, gamma_log_density, log_joint
from grepvi.models.model import OBSERVATION_AXIS, Model
from grepvi.models.sparse_gamma_def import sparse_gamma_def

__all__ = [
    "Factor",
    "LogJoint",
    "log_joint",
    "Model",
    "OBSERVATION_AXIS",
    "gamma_log_density",
    "sparse_gamma_def",
    "beta_gamma_mf",
]
