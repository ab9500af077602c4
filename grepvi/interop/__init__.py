"""Interoperability: NumPyro models in (and G-REP inside NumPyro's SVI), ArviZ out."""
