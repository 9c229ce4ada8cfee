"""Per-client values of a method's state, held where the hosting process says (design: Engines
"state holds values").

A :class:`ClientTable` is an immutable mapping client → value (a cached update, a memory y_i, a
client's own state). Methods read and replace values; they never see where a value lives. The
process that hosts the server chooses that once with :func:`use_store`: in process by default,
the Ray object store inside the server actor (so large memories spill to disk instead of filling
the actor's heap). Pickling a table materialises its values, so a snapshot or checkpoint of the
state is the state itself, and unpickling puts the values into the receiving process's store.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from ..accounting import state_nbytes


class LeafStore(Protocol):
    """Where table values live: ``put`` returns a handle, ``get`` the value back."""

    def put(self, value: Any) -> Any: ...

    def get(self, handle: Any) -> Any: ...


class InProcessStore:
    """The default store: the handle is the value itself."""

    def put(self, value: Any) -> Any:
        return value

    def get(self, handle: Any) -> Any:
        return handle


_STORE: LeafStore = InProcessStore()


def use_store(store: LeafStore) -> None:
    """Make ``store`` hold the values of every table built from now on in this process."""
    global _STORE
    _STORE = store


def value_nbytes(value: Any) -> int:
    """Bytes a value holds: a packed update's payload, a tensor's storage, nested tensors."""
    n = getattr(value, "nbytes", None)
    if isinstance(n, int) and not hasattr(value, "element_size"):
        return n
    return state_nbytes(value)


class ClientTable(Mapping[int, Any]):
    """Immutable client → value mapping whose values live in the process's store."""

    __slots__ = ("_handles", "_nbytes", "_store")

    def __init__(self, handles: dict[int, Any], nbytes: dict[int, int], store: LeafStore):
        self._handles, self._nbytes, self._store = handles, nbytes, store

    @classmethod
    def empty(cls) -> ClientTable:
        return cls({}, {}, _STORE)

    @classmethod
    def from_values(cls, values: Mapping[int, Any]) -> ClientTable:
        return cls.empty().updated(values)

    def __getitem__(self, client: int) -> Any:
        return self._store.get(self._handles[client])

    def __iter__(self) -> Iterator[int]:
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)

    def __contains__(self, client: object) -> bool:
        return client in self._handles

    def updated(self, new: Mapping[int, Any]) -> ClientTable:
        """A table with ``new``'s values replacing (or adding) those clients' entries."""
        handles, nbytes = dict(self._handles), dict(self._nbytes)
        for i in sorted(new):
            handles[i] = self._store.put(new[i])
            nbytes[i] = value_nbytes(new[i])
        return ClientTable(handles, nbytes, self._store)

    def only(self, keep: set[int] | frozenset[int]) -> ClientTable:
        """The entries of the clients in ``keep``."""
        return ClientTable(
            {i: h for i, h in self._handles.items() if i in keep},
            {i: n for i, n in self._nbytes.items() if i in keep},
            self._store,
        )

    def nbytes(self) -> int:
        """Bytes held by every value."""
        return sum(self._nbytes.values())

    def values_dict(self) -> dict[int, Any]:
        return {i: self[i] for i in self._handles}

    def __reduce__(self):
        return (ClientTable.from_values, (self.values_dict(),))

    def __repr__(self) -> str:
        return f"ClientTable({len(self)} clients, {self.nbytes()} bytes)"
