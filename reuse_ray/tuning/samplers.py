"""Optuna samplers as Tune can keep them: Tune pickles its searcher, sampler included, into the
experiment state (``tuner.pkl``) when a search starts and whenever it snapshots. Optuna 5.1's
NSGA-II sampler holds a ``threading.Lock``, which cannot be pickled, so every NSGA-II search
failed before its first trial; here such locks are left out of the pickle and made afresh when
it is read back (a lock holds no state a search needs)."""

from __future__ import annotations

import threading

import optuna

_LOCKS = (type(threading.Lock()), type(threading.RLock()))


class _Reentrant:
    """Stands in a pickled state for a re-entrant lock (``None`` stands for a plain one)."""


class _LocksAfresh:
    def __getstate__(self):
        state = dict(self.__dict__)
        for key, value in state.items():
            if isinstance(value, _LOCKS):
                state[key] = _Reentrant() if isinstance(value, _LOCKS[1]) else None
        state["__locks__"] = [k for k, v in self.__dict__.items() if isinstance(v, _LOCKS)]
        return state

    def __setstate__(self, state):
        for key in state.pop("__locks__", []):
            again = threading.RLock if isinstance(state[key], _Reentrant) else threading.Lock
            state[key] = again()
        self.__dict__.update(state)


class NSGAIISampler(_LocksAfresh, optuna.samplers.NSGAIISampler):
    """:class:`optuna.samplers.NSGAIISampler` that pickles (see the module's text)."""


__all__ = ["NSGAIISampler"]
