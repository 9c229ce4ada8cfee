"""Define-by-run Optuna search spaces that are not one method's own.

Each method registers its own space in its module (``reuse_ray/algorithms/<method>.py``), and a
sweep names it by the method: ``search: {space: dg_fedreuse}``. A module added here,
``search_spaces/<name>.py``, defines ``space(trial) -> dict | None`` the same way: it only calls
``trial.suggest_*`` (no computation), may branch on earlier suggestions, and may return constants
to merge into the trial's config. Parameter names are dotted run-config fields
(``method.dg.rho``), so a trial's parameters apply directly to the sweep's ``base`` config.
"""
