"""The contract between a method and the engine (design: Runs; design: Engines).

A method is one object, built once per run from its config block, that owns both sides of a round:

* **server side**, pure functions over an explicit state that goes in and comes out:
  :meth:`Method.init_state`, :meth:`Method.probes` (client work needed before deciding),
  :meth:`Method.plan` (tasks and a :class:`Decision` per client), :meth:`Method.server_step`
  (from the decoded uploads to ``w_{t+1}`` and the new state), :meth:`Method.memory_bytes`;
* **client side**: :meth:`Method.client_work` — what a client computes for a task, ending in the
  encoded messages it sends (its uplink encoder);
* **wire**: :meth:`Method.decode` — the server's decoder, which returns what the client sent and
  its bytes in the restricted ledger (the measured ledger is the messages' length).

The engine knows no method: it runs tasks, keeps each client's local state between its tasks,
charges bytes by the :class:`Decision` rules and records what comes back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..codecs import SparseUpdate
from ..lazy import torch
from ..state import StateLayout

# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Decision:
    """What happened to a client in a round, and how the ledgers charge it (design: Ledgers)."""

    name: str
    selected: bool = True  # a member of S_t: counted in num_selected and the dense reference
    fresh: bool = False  # counted in num_fresh
    reused: bool = False  # counted in num_reused
    idle_uplink: int = 0  # restricted uplink bytes charged when the client sent nothing
    downlink: bool = True  # the client received w_t (measured downlink)


REUSE_CHARGE_BYTES = 16  # the seed's fixed per-reuse uplink convention (R10)

FRESH = Decision("fresh", fresh=True)
REUSED = Decision("reused", reused=True, idle_uplink=REUSE_CHARGE_BYTES)
LAZY = Decision("lazy")  # trained, but its skip rule held the upload back (LAQ)
WAITING = Decision("waiting", downlink=False)  # selected, nothing moves yet (MIFA 'wait')
ORACLE = Decision("oracle", selected=False)  # trained outside S_t (FedSteer fidelity warm-up)
FILL = Decision("fill", selected=False)  # trained outside S_t to fill a memory (MIFA 'wait')

DECISIONS: dict[str, Decision] = {d.name: d for d in (FRESH, REUSED, LAZY, WAITING, ORACLE, FILL)}


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ClientTask:
    """Work for one client: the method's own instructions, and the client's own state."""

    client: int
    round: int
    work: Any = None  # the method's instructions (a frozen dataclass of its module)
    local: Any = None  # the client's state from its last task (None: first visit); engine-set


@dataclass(frozen=True)
class RoundPlan:
    """What the server decided before client work: tasks, and a decision per client."""

    tasks: tuple[ClientTask, ...]
    decisions: dict[int, Decision]
    columns: dict[int, dict[str, Any]] = field(default_factory=dict)  # per-client event columns
    down_extra: int = 0  # measured downlink bytes per receiving client besides w_t


@dataclass(frozen=True)
class ClientResult:
    """What a client's work produced: its encoded messages and what it keeps."""

    messages: tuple[bytes, ...]  # everything sent on the uplink, in order
    local: Any = None  # the client's new local state (None: keep the old one)
    mean_loss: float | None = None
    steps: int = 0
    finite: bool = True


@dataclass(frozen=True)
class Received:
    """A client's upload as the server decoded it."""

    client: int
    num_samples: int
    value: Any  # what the method's decoder returned
    steps: int = 0


@dataclass(frozen=True)
class StepResult:
    """The server step's output: next state and global vector, and each client's contribution."""

    state: Any
    w: torch.Tensor
    weights: dict[int, float]  # aggregation weight per client
    contribution_norms: dict[int, float]  # ‖u_i‖ per client
    decisions: dict[int, Decision] = field(default_factory=dict)  # known only after uploads


class ClientContext(Protocol):
    """What the engine offers a method's client side (training, data, the keyed streams)."""

    def num_samples(self, client: int) -> int: ...

    def train(
        self,
        task: ClientTask,
        w: torch.Tensor,
        *,
        mu: float = 0.0,
        correction: dict[str, torch.Tensor] | None = None,
        lr: float | None = None,  # overrides train.lr (a method's own schedule)
    ) -> Any: ...  # a training.LocalResult: delta, mean_loss, steps, finite

    def head_proxy(
        self,
        task: ClientTask,
        w: torch.Tensor,
        purpose: Any,
        *,
        batches: int,
        batch_size: int,
        mode: str,
    ) -> torch.Tensor: ...


class Method(Protocol):
    """A federated method: both sides of the round, in one object."""

    name: str

    def init_state(self, w0: torch.Tensor) -> Any: ...

    def probes(self, state: Any, t: int, selected: list[int]) -> tuple[ClientTask, ...]: ...

    def plan(
        self, state: Any, t: int, selected: list[int], probes: dict[int, Received]
    ) -> RoundPlan: ...

    def client_work(self, ctx: ClientContext, task: ClientTask, w: torch.Tensor) -> ClientResult:
        """One selected client's computation, ending in the bytes it sends. It may run in a
        thread beside other clients' (``engine.vectorize`` trains their ``ctx.train`` calls
        together), so it keeps what it needs in locals, ``task`` and the result, never in
        ``self``."""
        ...

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]) -> tuple[Any, int]: ...

    def server_step(
        self,
        state: Any,
        t: int,
        w: torch.Tensor,
        plan: RoundPlan,
        uploads: dict[int, Received],
        num_samples: dict[int, int],
    ) -> StepResult: ...

    def memory_bytes(self, state: Any) -> int: ...


@dataclass(frozen=True)
class MethodEnv:
    """What a method is built from besides its config: the model's layout and the federation."""

    layout: StateLayout
    head_names: tuple[str, ...]
    seed: int
    num_clients: int
    probs: tuple[float, ...]  # p_i of the participation model (methods: Conventions)
    server_lr: float
    topk_ratio: float
    error_feedback: bool
    train: Any  # the run's TrainConfig (lr, momentum: SCAFFOLD's K η_l)

    @classmethod
    def from_config(
        cls, cfg: Any, layout: StateLayout, head_names: list[str], probs: Any
    ) -> MethodEnv:
        """The environment of a run config's method (``cfg`` is a RunConfig)."""
        m = cfg.method
        return cls(
            layout,
            tuple(head_names),
            cfg.seed,
            cfg.fl.num_clients,
            tuple(float(p) for p in probs),
            cfg.fl.server_lr,
            m.topk_ratio,
            m.error_feedback,
            cfg.train,
        )

    @property
    def head_layout(self) -> StateLayout:
        return self.layout.subset(list(self.head_names))


# --------------------------------------------------------------------------- shared math


def sample_weights(clients: list[int], num_samples: dict[int, int]) -> dict[int, float]:
    """π_i = n_i / Σ_{j∈S} n_j over the given clients (methods: Conventions)."""
    total = sum(num_samples[i] for i in clients)
    return {i: num_samples[i] / total for i in clients} if total else {}


def uniform_weights(clients: list[int]) -> dict[int, float]:
    """1/|S| over the given clients."""
    return {i: 1.0 / len(clients) for i in clients}


def client_weights(clients: list[int], num_samples: dict[int, int], kind: str) -> dict[int, float]:
    """``samples``: π_i; ``uniform``: 1/|S| (the two weightings every method offers)."""
    if kind == "uniform":
        return uniform_weights(clients)
    return sample_weights(clients, num_samples)


def population_weights(num_samples: dict[int, int], kind: str) -> dict[int, float]:
    """α_j = n_j / Σ_all n (``samples``) or 1/N (``uniform``) over every client
    (methods: Conventions)."""
    if kind == "uniform":
        return {i: 1.0 / len(num_samples) for i in num_samples}
    total = sum(num_samples.values())
    return {i: v / total for i, v in num_samples.items()}


def weighted_sum(contributions: list[tuple[float, SparseUpdate]], dim: int) -> torch.Tensor:
    """Σ weight·u in fp32, accumulated in the order given (callers sort by client id)."""
    acc = torch.zeros(dim, dtype=torch.float32)
    for weight, upd in contributions:
        upd.add_into(acc, weight)
    return acc


def fedavg_aggregate(
    w: torch.Tensor, updates: dict[int, SparseUpdate], weights: dict[int, float], server_lr: float
) -> torch.Tensor:
    """w + η_s Σ π_i u_i over the given clients, in ascending client order
    (methods: Conventions)."""
    if not updates:
        return w.clone()
    avg = weighted_sum([(weights[i], updates[i]) for i in sorted(updates)], w.numel())
    return w + server_lr * avg


def norms(values: dict[int, SparseUpdate | torch.Tensor]) -> dict[int, float]:
    """‖u_i‖ per client (of the kept values, for sparse updates)."""
    out = {}
    for i, v in values.items():
        out[i] = float((v.values if isinstance(v, SparseUpdate) else v).norm())
    return out
