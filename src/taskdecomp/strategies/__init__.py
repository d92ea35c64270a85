"""Strategies: small modules that compose the shared engine into an agent loop."""
