"""calc: small arithmetic helpers, one module each."""
