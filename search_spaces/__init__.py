"""Define-by-run Optuna search spaces, one module per method.

Each module defines ``space(trial) -> dict | None``: it only calls ``trial.suggest_*`` (no
computation), may branch on earlier suggestions, and may return constants to merge into the
trial's config. Parameter names are dotted run-config fields (``method.dg.rho``), so a trial's
parameters apply directly to the sweep's ``base`` config.
"""
