"""FedSteer: corrective projections onto a dynamic gradient subspace (methods: FedSteer).

Convention of the paper: pseudo-gradient g_i = w_t − w_i^loc = −Δ_i and w_{t+1} = w_t − η_s V_t.
The server caches full pseudo-gradients h_j only for the K core clients X (during the warm-up,
for every client that took part, because the core set is still being searched) and a coordinate
vector s_i ∈ R^K for every client, so after warm-up it holds O(K·d + N·K) numbers.

    Q_t   = [h_j / K]_{j∈X}                       (built before this round's refresh)
    s_i   = (QᵀQ + λI)^{-1} Qᵀ g_i                 (active clients, after warm-up)
    ĝ_i   = Q s_i                                  (every client: stale coordinates, current Q)
    V_t   = Σ_i d_i ĝ_i + Σ_{i∈A_t} (d_i/p_i)(g_i − ĝ_i)
    h_i  ← β g_i                                   (active i; after warm-up only i ∈ X is kept)

Warm-up (t ≤ W): greedy swap search for X minimising J(X) (:func:`coreset_objective`), then
s_ij = ŝ_ij ‖g_i‖/‖h_j‖.

Two modes (methods: FedSteer): ``fidelity`` follows the reference code — the warm-up trains
**all N** clients (an oracle; the extra clients appear as ``oracle`` events and are charged),
features are the last state entry only, warm-up coordinates are applied to h_j/K (shrunk by
1/K), and an active client's ĝ_i uses its fresh s_i. ``clean`` uses active clients only (others
keep s_i = 0 until they first take part), the full vector as features, unshrunk coordinates, and
ĝ_i from the pre-round s_i, which keeps the correction term unbiased.

An empty A_t steps by the estimates Σ d_i ĝ_i alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_choice, check_range
from ..errors import UserError
from ..lazy import torch
from ..rng import Purpose, generator
from ..state import StateLayout
from .api import FRESH, ORACLE, ClientTask, MethodEnv, Received, RoundPlan, StepResult
from .fedavg import Train
from .registry import register
from .table import ClientTable
from .uplink import TopK, decode_update, train_and_send

NORM_EPS = 1e-8

# --------------------------------------------------------------------------- pure math


def ridge_coordinates(q: torch.Tensor, g: torch.Tensor, lam: float) -> torch.Tensor:
    """s = (QᵀQ + λI)^{-1} Qᵀ g, for g of shape (d,) or (d, n); float64 solve."""
    q64 = q.double()
    gram = q64.T @ q64 + lam * torch.eye(q.shape[1], dtype=torch.float64)
    return torch.linalg.solve(gram, q64.T @ g.double()).to(torch.float32)


def fedsteer_direction(
    q: torch.Tensor,
    s: torch.Tensor,
    d: torch.Tensor,
    active: dict[int, torch.Tensor],
    s_hat_active: dict[int, torch.Tensor],
    p: dict[int, float],
) -> torch.Tensor:
    """V = Q (Σ_i d_i s_i) + Σ_{i∈A} (d_i/p_i)(g_i − Q s̃_i), with s̃_i the coordinates used for
    the active client's estimate (pre-round in clean mode, refreshed in fidelity mode).

    ``s`` is the (N, K) coordinate matrix used for the Σ_i d_i ĝ_i term."""
    v = q @ (d @ s) if q.numel() else torch.zeros(q.shape[0])
    for i in sorted(active):
        est = q @ s_hat_active[i]
        v = v + (float(d[i]) / p[i]) * (active[i] - est)
    return v


def remap_coords(
    coords: torch.Tensor, old_core: tuple[int, ...], new_core: tuple[int, ...]
) -> torch.Tensor:
    """Coordinates against ``old_core`` re-expressed against ``new_core``: the column of a core
    client kept in X moves with it; a new member's column starts at 0 (its h_j was never in the
    subspace those coordinates were fitted to)."""
    out = torch.zeros(coords.shape[0], len(new_core), dtype=coords.dtype)
    where = {j: c for c, j in enumerate(old_core)}
    for c, j in enumerate(new_core):
        if j in where:
            out[:, c] = coords[:, where[j]]
    return out


def _normalise(rows: torch.Tensor) -> torch.Tensor:
    return rows / (rows.norm(dim=1, keepdim=True) + NORM_EPS)


def coreset_fit(
    gu: torch.Tensor,
    gvv: torch.Tensor,
    uu: torch.Tensor,
    x: list[int],
    omega: torch.Tensor,
    lam_i: torch.Tensor,
    lam: float,
) -> tuple[float, torch.Tensor]:
    """J(X) and ŝ (n × K) from Gram matrices: gu = U Vᵀ (n × N), gvv = V Vᵀ, uu = ‖u_i‖²."""
    gxx = gvv[np.ix_(x, x)]
    b = gu[:, x]  # (n, K): u_i · v_j
    k = len(x)
    mats = gxx.unsqueeze(0) + lam_i.view(-1, 1, 1) * torch.eye(k, dtype=gxx.dtype).unsqueeze(0)
    s_hat = torch.linalg.solve(mats, b.unsqueeze(-1)).squeeze(-1)  # ŝ_i = u_i V_Xᵀ (·)^{-1}
    resid = uu - 2 * (s_hat * b).sum(1) + torch.einsum("ik,kl,il->i", s_hat, gxx, s_hat)
    j = float((omega * resid).sum() + lam * (s_hat**2).sum())
    return j, s_hat


def coreset_objective(
    u: torch.Tensor,
    v: torch.Tensor,
    x: list[int],
    omega: torch.Tensor,
    lam_i: torch.Tensor,
    lam: float,
) -> float:
    """J(X) = Σ_i ω_i ‖u_i − ŝ_i V_X‖² + λ Σ_i ‖ŝ_i‖² computed directly (for checks)."""
    u64, v64 = u.double(), v.double()
    vx = v64[x]
    total = 0.0
    for i in range(u64.shape[0]):
        m = vx @ vx.T + float(lam_i[i]) * torch.eye(len(x), dtype=torch.float64)
        s_i = torch.linalg.solve(m, vx @ u64[i])
        total += float(omega[i]) * float(((u64[i] - s_i @ vx) ** 2).sum()) + lam * float(
            (s_i**2).sum()
        )
    return total


def coreset_search(
    u: torch.Tensor,
    v: torch.Tensor,
    omega: torch.Tensor,
    lam_i: torch.Tensor,
    lam: float,
    k: int,
    swaps: int,
    rng: np.random.Generator,
) -> tuple[list[int], torch.Tensor, list[float]]:
    """Greedy local search: random K-subset of the N candidates (rows of v), then up to
    ``swaps`` passes, each applying the single (out, in) swap that lowers J(X) most; stops when
    none does. Returns X (sorted), ŝ (n × K, columns in X's order) and J after each pass."""
    u64, v64 = _normalise(u.double()), _normalise(v.double())
    gu, gvv, uu = u64 @ v64.T, v64 @ v64.T, (u64**2).sum(1)
    n_cand = v.shape[0]
    x = sorted(int(j) for j in rng.choice(n_cand, size=k, replace=False))
    best, s_hat = coreset_fit(gu, gvv, uu, x, omega.double(), lam_i.double(), lam)
    history = [best]
    for _ in range(swaps):
        move = None
        for out in x:
            for inn in range(n_cand):
                if inn in x:
                    continue
                cand = sorted([j for j in x if j != out] + [inn])
                j, sh = coreset_fit(gu, gvv, uu, cand, omega.double(), lam_i.double(), lam)
                if j < best - 1e-12 * abs(best) and (move is None or j < move[0]):
                    move = (j, cand, sh)
        if move is None:
            break
        best, x, s_hat = move
        history.append(best)
    return x, s_hat.to(torch.float32), history


# --------------------------------------------------------------------------- the method


@dataclass(frozen=True)
class FedSteerConfig:
    """FedSteer (methods: FedSteer); defaults are the reference main run."""

    core_size: int = 10  # K, clients whose full pseudo-gradient is cached
    ridge: float = 0.5  # λ of the ridge projection
    warmup: int = 5  # W, rounds of core-set search
    swaps: int = 5  # swap passes of the greedy core-set search
    beta: float = 1.0  # cache refresh h_i <- beta * g_i
    mode: str = "fidelity"  # fidelity: the reference code's oracle warm-up | clean: no oracle

    def __post_init__(self) -> None:
        check_range("core_size", self.core_size, 1)
        check_range("ridge", self.ridge, 0.0, lo_open=True)
        check_range("warmup", self.warmup, 0)
        check_range("swaps", self.swaps, 0)
        check_range("beta", self.beta, 0.0, 1.0)
        check_choice("mode", self.mode, ("fidelity", "clean"))


@dataclass(frozen=True)
class SteerState:
    cache: ClientTable  # h_j
    coords: torch.Tensor  # s: (N, K)
    core: tuple[int, ...]  # X (empty before the first warm-up search)


@dataclass(frozen=True)
class FedSteer:
    env: MethodEnv
    core_size: int = 10
    ridge: float = 0.5
    warmup: int = 5
    swaps: int = 5
    beta: float = 1.0
    mode: str = "fidelity"
    name: str = "fedsteer"

    def __post_init__(self) -> None:
        n = self.env.num_clients
        if self.core_size > n:
            raise UserError(
                f"method.fedsteer.core_size: {self.core_size} is more than the {n} clients; "
                f"allowed: [1, {n}]"
            )

    @property
    def layout(self) -> StateLayout:
        return self.env.layout

    @property
    def probs(self) -> tuple[float, ...]:
        return self.env.probs

    @property
    def fidelity(self) -> bool:
        return self.mode == "fidelity"

    def init_state(self, w0: torch.Tensor) -> SteerState:
        return SteerState(ClientTable.empty(), torch.zeros(len(self.probs), self.core_size), ())

    def probes(self, state, t, selected):
        return ()

    def plan(self, state: SteerState, t: int, selected: list[int], probes=None) -> RoundPlan:
        if self.fidelity and t <= self.warmup:  # the reference trains every client (oracle)
            everyone = range(len(self.probs))
            decisions = {i: (FRESH if i in selected else ORACLE) for i in everyone}
            return RoundPlan(tuple(ClientTask(i, t, Train()) for i in everyone), decisions)
        return RoundPlan(
            tuple(ClientTask(i, t, Train()) for i in selected), {i: FRESH for i in selected}
        )

    def client_work(self, ctx, task: ClientTask, w: torch.Tensor):
        return train_and_send(ctx, task, w, self.layout, TopK(1.0))  # the dense Δ

    def decode(self, task: ClientTask, messages: tuple[bytes, ...]):
        return decode_update(messages[0], self.layout)

    def _h(self, state: SteerState, j: int, dim: int) -> torch.Tensor:
        h = state.cache.get(j)
        return torch.zeros(dim) if h is None else h

    def _features(self, g: torch.Tensor) -> torch.Tensor:
        if not self.fidelity:
            return g
        last = self.layout.tensors[-1]  # the reference's matching.py::flatten_weights
        return g[..., last.offset : last.offset + last.numel]

    def server_step(
        self, state: SteerState, t, w, plan, uploads: dict[int, Received], num_samples
    ) -> StepResult:
        dim, n, k = w.numel(), len(self.probs), self.core_size
        total_n = sum(num_samples.values())
        d = torch.tensor([num_samples[i] / total_n for i in range(n)], dtype=torch.float32)
        g = {i: -u.value.to_dense() for i, u in uploads.items()}  # pseudo-gradients
        active = {i: g[i] for i in g if plan.decisions.get(i) == FRESH}
        coords, core = state.coords.clone(), state.core
        s_before = state.coords
        if t <= self.warmup and g:
            coords, core = self._warmup(state, t, g, d, coords)
            if not self.fidelity and core != state.core:
                # clean mode: stale s_i were computed against the old X; re-map them by core
                # id so coordinate j still points at the same core client (fresh rows keep
                # their new coordinates)
                s_before = remap_coords(state.coords, state.core, core)
                fresh_rows = sorted(g)
                remapped = s_before.clone()
                remapped[fresh_rows] = coords[fresh_rows]
                coords = remapped
        q = (
            torch.stack([self._h(state, j, dim) for j in core], 1) / k
            if core
            else torch.zeros(dim, 0)
        )
        if t > self.warmup and core and active:
            ids = sorted(active)
            coords[ids] = ridge_coordinates(
                q, torch.stack([active[i] for i in ids], 1), self.ridge
            ).T
        s_use = coords if self.fidelity else s_before
        if not core:
            s_use = torch.zeros(n, 0)
        s_hat = {i: s_use[i] for i in active}
        p = {i: self.probs[i] for i in active}
        v = fedsteer_direction(q, s_use, d, active, s_hat, p)
        final = t >= self.warmup  # the core set is final: keep h only for its members
        cache = state.cache.only(set(core)) if final else state.cache
        cache = cache.updated(
            {i: self.beta * active[i] for i in sorted(active) if not final or i in core}
        )
        weights = {i: float(d[i]) / p[i] for i in active}
        norms = {i: float(gi.norm()) for i, gi in g.items()}
        return StepResult(
            SteerState(cache, coords, tuple(core)), w - self.env.server_lr * v, weights, norms
        )

    def _warmup(
        self,
        state: SteerState,
        t: int,
        g: dict[int, torch.Tensor],
        d: torch.Tensor,
        coords: torch.Tensor,
    ) -> tuple[torch.Tensor, tuple[int, ...]]:
        """Core-set search on the clients with a fresh g_i (all N in fidelity mode)."""
        n, k, dim = len(self.probs), self.core_size, next(iter(g.values())).numel()
        rows = sorted(g)
        p = torch.tensor([self.probs[i] for i in rows], dtype=torch.float64)
        di = d.double()[rows]
        omega = di**2 / p
        lam_i = self.ridge * p / torch.clamp(di**2, min=1e-30)
        u = torch.stack([self._features(g[i]) for i in rows])
        hs = [self._h(state, j, dim) for j in range(n)]
        v = torch.stack([self._features(h) for h in hs])
        rng = generator(self.env.seed, Purpose.CORESET, t)
        x, s_hat, _ = coreset_search(u, v, omega, lam_i, self.ridge, k, self.swaps, rng)
        h_norm = torch.tensor([float(hs[j].norm()) for j in x]) + NORM_EPS
        scale = 1.0 if self.fidelity else float(k)  # quirk 2: fidelity applies to h_j / K
        for r, i in enumerate(rows):
            coords[i] = s_hat[r] * float(g[i].norm()) / h_norm * scale
        return coords, tuple(x)

    def memory_bytes(self, state: SteerState) -> int:
        dim = self.layout.dim
        return 4 * dim * len(state.cache) + 4 * state.coords.numel()


def space(trial):
    trial.suggest_int("method.fedsteer.core_size", 2, 20)
    trial.suggest_float("method.fedsteer.ridge", 0.01, 10.0, log=True)
    trial.suggest_int("method.fedsteer.warmup", 1, 10)
    trial.suggest_float("method.fedsteer.beta", 0.5, 1.0)
    trial.suggest_float("fl.server_lr", 0.3, 1.5)
    return None


@register("fedsteer", config=FedSteerConfig, space=space, sparse_uplink=False)
def build(params: FedSteerConfig, env: MethodEnv) -> FedSteer:
    f = params
    return FedSteer(env, f.core_size, f.ridge, f.warmup, f.swaps, f.beta, f.mode)
