"""A path a user gave (a config field, ``--results``, ``fetch --root``), made usable or refused
in one line naming where it came from: an unknown ``~user``, a name or a path longer than the
filesystem allows; and a folder of pickles refused unless only this user could have written it."""

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


def check_tune_state_is_yours(path: str) -> None:
    """Refuse to resume from Tune state someone else could have written.

    ``Tuner.restore`` unpickles the experiment's state (``tuner.pkl``, the searcher's state,
    each trial's ``params.pkl``), and unpickling runs code. On a local or mounted filesystem
    every entry of the experiment folder must be owned by this user, writable by nobody else
    and not a symbolic link (the checks ssh makes of its keys); one that is not is named in one
    line and nothing is read. Object stores carry no owner, so there the rule stays the user's:
    resume only roots you or your cluster wrote (docs/guide.md, "Running one FL run")."""
    import stat

    me = os.getuid()

    def refuse(entry: str, why: str) -> None:
        raise UserError(
            f"sweep --resume: {entry} {why}; Tune unpickles its experiment state "
            f"when it resumes, so it resumes only from files you own and nobody "
            f"else can write — check them, then `chmod -R go-w {path}` (or `chown`), "
            f"or run the sweep into a fresh --results"
        )

    def check(entry: str) -> None:
        st = os.lstat(entry)
        if stat.S_ISLNK(st.st_mode):
            refuse(entry, "is a symbolic link")
        if st.st_uid != me:
            refuse(entry, f"is owned by uid {st.st_uid}, not by you (uid {me})")
        if st.st_mode & stat.S_IWOTH:
            refuse(entry, "is writable by others")
        if st.st_mode & stat.S_IWGRP:
            refuse(entry, "is writable by its group")

    for top, dirs, files in os.walk(path):  # links are not followed: listed, then refused
        check(top)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            check(os.path.join(top, name))


__all__ = ["check_tune_state_is_yours", "user_path"]
