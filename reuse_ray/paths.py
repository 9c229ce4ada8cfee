"""A path a user gave (a config field, ``--results``, ``fetch --root``), made usable or refused
in one line naming where it came from: an unknown ``~user``, a name or a path longer than the
filesystem allows."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError

NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits (and most others' at least as strict)


def user_path(value: str | Path, field: str) -> Path:
    """``value`` with ``~`` / ``~user`` expanded; :class:`UserError` naming ``field`` when it
    cannot be: an unknown user, a component over ``NAME_MAX`` bytes, a path over
    ``PATH_MAX``."""
    text = str(value)
    try:
        p = Path(text).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        user = text[1:].split("/", 1)[0]
        who = f"user {user!r}" if user else "this user (HOME is unset)"
        raise UserError(
            f"{field}: {_short(text)} starts with ~{user}, but {who} has no home folder here "
            "— give an absolute path, or ~ for your own home"
        ) from None
    longest = max((len(os.fsencode(part)) for part in p.parts), default=0)
    if longest > NAME_MAX or len(os.fsencode(str(p))) > PATH_MAX:
        raise UserError(
            f"{field}: {_short(text)} is too long ({len(text)} characters, a folder name of "
            f"{longest}) — allowed: names of at most {NAME_MAX} bytes, paths of at most "
            f"{PATH_MAX}"
        )
    return p


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else f"{text[:40]}…{text[-30:]}")


__all__ = ["user_path"]
