"""What each search space searches, read from the spaces themselves (``search.space``, a
study arm's ``space``): every registered space is sampled ``SAMPLES`` times with Optuna's random
sampler (seed 0), and each parameter it drew is given with its range, scale and how often it
was drawn (a parameter drawn on one branch only shows the share of draws). A bound that an
earlier draw sets (``method.dg.tau_min`` ≤ ``method.dg.tau0``) is named by that parameter. The
reference page prints the table (:func:`reuse_ray.reference.render`); a test checks it against
the spaces by hand."""

from __future__ import annotations

from typing import Any

SAMPLES = 200
COLS = ("space", "parameter", "range", "scale", "drawn")


def _bound(extreme: float, named: list[str | None]) -> str:
    """One side of a range that varies: the drawn parameter that set it in every draw, else
    its widest value over the draws."""
    if named and named[0] is not None and len(set(named)) == 1:
        return f"`{named[0]}`"
    return f"{extreme:g}"


def _range(draws: list[tuple[Any, dict[str, Any]]]) -> str:
    import optuna.distributions as od

    first = draws[0][0]
    if isinstance(first, od.CategoricalDistribution):
        values: list[Any] = []
        for d, _ in draws:
            values += [c for c in d.choices if c not in values]
        return ", ".join(str(v) for v in values)

    def setter(value: float, params: dict[str, Any]) -> str | None:
        return next((k for k, v in params.items() if v == value), None)

    lows, highs = [d.low for d, _ in draws], [d.high for d, _ in draws]
    lo, hi = f"{lows[0]:g}", f"{highs[0]:g}"
    if len(set(lows)) > 1:
        lo = _bound(min(lows), [setter(d.low, p) for d, p in draws])
    if len(set(highs)) > 1:
        hi = _bound(max(highs), [setter(d.high, p) for d, p in draws])
    return f"[{lo}, {hi}]"


def _scale(d) -> str:
    import optuna.distributions as od

    if isinstance(d, od.CategoricalDistribution):
        return "choice"
    kind = "integer" if isinstance(d, od.IntDistribution) else "real"
    if d.log:
        return f"{kind}, log"
    return f"{kind}, step {d.step:g}" if d.step not in (None, 1) else f"{kind}, linear"


def space_draws(name: str, samples: int = SAMPLES) -> tuple[dict[str, list], dict[str, set]]:
    """The space's draws: per parameter its (distribution, the trial's other values) in draw
    order; per fixed key the values the space set."""
    import optuna

    from .tuning.spaces import load_space

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    fn = load_space(name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen: dict[str, list] = {}
    fixed: dict[str, set] = {}
    for _ in range(samples):
        trial = study.ask()
        for key, value in (fn(trial) or {}).items():
            fixed.setdefault(key, set()).add(repr(value))
        for key, dist in trial.distributions.items():
            others = {k: v for k, v in trial.params.items() if k != key}
            seen.setdefault(key, []).append((dist, others))
    return seen, fixed


def packaged_spaces() -> list[str]:
    """The spaces the package ships: its own methods' and the ``search_spaces`` modules' (a
    user's method loaded from ``method.module`` is not the package's to document)."""
    from .algorithms.registry import get_method, spaces
    from .tuning.spaces import available_spaces

    registered = spaces()
    return [
        name
        for name in available_spaces()
        if name not in registered or get_method(name).module.startswith("reuse_ray.")
    ]


def space_rows(samples: int = SAMPLES) -> list[dict[str, str]]:
    """One row per parameter of every packaged space, in the order each space draws them."""
    rows = []
    for name in packaged_spaces():
        seen, fixed = space_draws(name, samples)
        for key, draws in seen.items():
            n = len(draws)
            rows.append(
                {
                    "space": name,
                    "parameter": f"`{key}`",
                    "range": _range(draws),
                    "scale": _scale(draws[0][0]),
                    "drawn": "always" if n == samples else f"{n} of {samples} draws",
                }
            )
        for key, values in fixed.items():
            rows.append(
                {
                    "space": name,
                    "parameter": f"`{key}`",
                    "range": "set to " + ", ".join(sorted(values)),
                    "scale": "fixed",
                    "drawn": "always",
                }
            )
    return rows
