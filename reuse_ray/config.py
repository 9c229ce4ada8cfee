"""Frozen run configuration, loaded from YAML and validated with messages that name the field.

Every block is a frozen dataclass; the whole run is one :class:`RunConfig`. Values are read with
``yaml.safe_load`` and checked on construction: an unknown field, a wrong type or a value out of
its range raises :class:`ConfigError` naming the dotted field and what is allowed.

Protocol defaults follow shared/ALGORITHMS.md §4.1 (DG-FedReuse protocol): 50 clients, 10 per
round, Dirichlet 0.5, 3 local epochs, batch 128, SGD lr 0.05, momentum 0.9, weight decay 1e-4.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DATASETS = (
    "digits",
    "synthetic",
    "mnist",
    "fashionmnist",
    "emnist_balanced",
    "cifar10",
    "cifar100",
    "pathmnist",
)
METHODS = (
    "fedavg",
    "fedprox",
    "fedadam",
    "dg_fedreuse",
    "fedluar",
    "fedsteer",
    "mifa",
    "fedvarp",
    "fedstale",
    "scaffold",
    "ef21",
    "laq",
)
PARTICIPATION = ("uniform", "bernoulli", "two_group", "groups", "adversarial")
DG_SCHEDULES = ("geometric", "linear", "exponential")
DG_DISTANCES = ("clipped_cosine", "half_cosine")
DG_DECAYS = ("power", "constant", "power_minus_one")
DG_GATES = ("proxy", "off", "random")
PARTITIONS = ("dirichlet", "iid", "shards")
MODELS = ("auto", "cnn", "resnet18")
AUGMENTS = ("auto", "none", "crop_flip")
BACKENDS = ("ray", "local")
DEVICES = ("auto", "cpu", "cuda")


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or out of range."""

    def __init__(self, field_path: str, message: str):
        self.field = field_path
        super().__init__(f"config field '{field_path}': {message}")

    def prefixed(self, prefix: str) -> ConfigError:
        inner = str(self).split(": ", 1)[1]
        return ConfigError(f"{prefix}.{self.field}", inner)


# --------------------------------------------------------------------------- checks


def _check_range(
    name: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> None:
    ok = True
    if lo is not None:
        ok &= value > lo if lo_open else value >= lo
    if hi is not None:
        ok &= value < hi if hi_open else value <= hi
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        lo_s = "-inf" if lo is None else repr(lo)
        hi_s = "inf" if hi is None else repr(hi)
        raise ConfigError(name, f"{value!r} is out of range; allowed: {left}{lo_s}, {hi_s}{right}")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, f"unknown value {value!r}; allowed: {', '.join(allowed)}")


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class DataConfig:
    """Dataset choice and splits (ALGORITHMS.md §4.1, §6 item 1)."""

    name: str = "digits"  # one of DATASETS
    root: str | None = None  # data root; None -> $REUSE_RAY_DATA -> ~/.cache/reuse_ray/data
    download: bool = False  # downloads are attempted only when this is true
    val_fraction: float = 0.1  # stratified validation carve-out where no val split exists
    split_seed: int = 0  # fixes val/test carving, independent of the run seed
    image_size: int = 28  # medmnist image size (28, 64, 128, 224)
    synthetic_samples: int = 2000  # synthetic: train+test samples
    synthetic_shape: tuple[int, ...] = (1, 8, 8)  # synthetic: C, H, W
    synthetic_classes: int = 10
    synthetic_noise: float = 1.0  # synthetic: noise std around each class template

    def __post_init__(self) -> None:
        _check_choice("name", self.name, DATASETS)
        _check_range("val_fraction", self.val_fraction, 0.0, 1.0, lo_open=True, hi_open=True)
        _check_range("split_seed", self.split_seed, 0)
        _check_choice("image_size", str(self.image_size), ("28", "64", "128", "224"))
        _check_range("synthetic_samples", self.synthetic_samples, 20)
        if len(self.synthetic_shape) != 3 or min(self.synthetic_shape) < 1:
            raise ConfigError(
                "synthetic_shape", f"{self.synthetic_shape!r}; allowed: [C, H, W] >= 1"
            )
        _check_range("synthetic_classes", self.synthetic_classes, 2)
        _check_range("synthetic_noise", self.synthetic_noise, 0.0)


@dataclass(frozen=True)
class PartitionConfig:
    """How the training split is spread over clients (ALGORITHMS.md §4.1)."""

    kind: str = "dirichlet"  # dirichlet | iid | shards
    alpha: float = 0.5  # Dirichlet concentration
    min_size: int = 10  # every client gets at least this many samples (Dirichlet retries)
    shards_per_client: int = 2  # shards partition

    def __post_init__(self) -> None:
        _check_choice("kind", self.kind, PARTITIONS)
        _check_range("alpha", self.alpha, 0.0, lo_open=True)
        _check_range("min_size", self.min_size, 1)
        _check_range("shards_per_client", self.shards_per_client, 1)


@dataclass(frozen=True)
class ModelConfig:
    """Model choice: the shallow CNN or torchvision ResNet-18 (auto: ResNet-18 for CIFAR)."""

    name: str = "auto"
    hidden: int = 128  # width of the CNN's hidden linear layer

    def __post_init__(self) -> None:
        _check_choice("name", self.name, MODELS)
        _check_range("hidden", self.hidden, 1)


@dataclass(frozen=True)
class TrainConfig:
    """Local training, ALGORITHMS.md §1.3."""

    epochs: int = 3
    batch_size: int = 128
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-4
    augment: str = "auto"  # auto: crop+flip for CIFAR, none otherwise
    threads: int = 1  # torch threads for client work; fixed so results do not depend on cores
    amp: bool = True  # autocast on CUDA only; codecs and ledger always see fp32 deltas
    eval_batch_size: int = 1024

    def __post_init__(self) -> None:
        _check_range("epochs", self.epochs, 1)
        _check_range("batch_size", self.batch_size, 1)
        _check_range("lr", self.lr, 0.0, lo_open=True)
        _check_range("momentum", self.momentum, 0.0, 1.0, hi_open=True)
        _check_range("weight_decay", self.weight_decay, 0.0)
        _check_choice("augment", self.augment, AUGMENTS)
        _check_range("threads", self.threads, 1)
        _check_range("eval_batch_size", self.eval_batch_size, 1)


@dataclass(frozen=True)
class FLConfig:
    """The federation: clients, participation and the fixed round budget (§1.5)."""

    num_clients: int = 50
    clients_per_round: int = 10
    rounds: int = 30  # final round T, fixed in advance; the test split is read once, at T
    eval_every: int = 5  # validation at round 1, every eval_every rounds and at T
    server_lr: float = 1.0  # eta_s of the FedAvg family (§1.7)
    participation: str = "uniform"  # uniform | bernoulli | two_group | groups | adversarial (§1.4)
    two_group_a: float = 5.0  # two_group: weight 1+a on the first half of the ids
    group_probs: tuple[float, ...] = (1.0, 0.5)  # groups: p of each contiguous block of ids
    # adversarial (MIFA): p_i = p_min + (p_max − p_min)·min_label_i/(K − 1)
    avail_min: float = 0.1
    avail_max: float = 1.0

    def __post_init__(self) -> None:
        _check_choice("participation", self.participation, PARTICIPATION)
        _check_range("two_group_a", self.two_group_a, 0.0)
        _check_range("avail_min", self.avail_min, 0.0, 1.0, lo_open=True)
        _check_range("avail_max", self.avail_max, self.avail_min, 1.0)
        if not self.group_probs or any(not 0.0 < p <= 1.0 for p in self.group_probs):
            raise ConfigError(
                "group_probs", f"{list(self.group_probs)!r}; allowed: a non-empty list in (0, 1]"
            )
        if self.participation == "groups" and len(self.group_probs) > self.num_clients:
            raise ConfigError(
                "group_probs",
                f"{len(self.group_probs)} groups for {self.num_clients} clients; "
                f"allowed: at most num_clients groups",
            )
        _check_range("num_clients", self.num_clients, 1)
        _check_range("clients_per_round", self.clients_per_round, 1)
        _check_range("rounds", self.rounds, 1)
        _check_range("eval_every", self.eval_every, 1)
        _check_range("server_lr", self.server_lr, 0.0, lo_open=True)
        if self.clients_per_round > self.num_clients:
            raise ConfigError(
                "clients_per_round",
                f"{self.clients_per_round} is more than num_clients={self.num_clients}; "
                f"allowed: [1, {self.num_clients}]",
            )


@dataclass(frozen=True)
class FedProxConfig:
    """FedProx (ALGORITHMS.md §2.2); the seed's control uses mu = 5e-4."""

    mu: float = 5e-4

    def __post_init__(self) -> None:
        _check_range("mu", self.mu, 0.0)


@dataclass(frozen=True)
class FedAdamConfig:
    """FedAdam (ALGORITHMS.md §2.10); seed values eta=0.01, beta1=0.9, beta2=0.99, tau=1e-3."""

    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    v0: str = "tau_squared"  # v_0 = tau^2 (paper) or zero (Flower)

    def __post_init__(self) -> None:
        _check_range("lr", self.lr, 0.0, lo_open=True)
        _check_range("beta1", self.beta1, 0.0, 1.0, hi_open=True)
        _check_range("beta2", self.beta2, 0.0, 1.0, hi_open=True)
        _check_range("tau", self.tau, 0.0, lo_open=True)
        _check_choice("v0", self.v0, ("tau_squared", "zero"))


@dataclass(frozen=True)
class DGConfig:
    """DG-FedReuse (ALGORITHMS.md §2.3); defaults are the paper's frozen values (§4.1)."""

    tau0: float = 0.9116988  # τ0, threshold at round 1
    tau_min: float = 0.8134931  # τ_min, the threshold's floor
    gamma: float = 0.01  # γ, decay of the threshold schedule
    schedule: str = "geometric"  # R2: max(τmin, τ0(1−γ)^(t−1)); or linear / exponential
    max_age: int = 4  # S: a cached update of age ≥ S forces a fresh round
    rho: float = 0.7279635  # ρ, age decay of reused updates
    quota: float = 0.30  # q: at least ⌈q·m⌉ fresh clients per round
    mu: float = 3.4156e-4  # proximal μ of the fresh path (R4); not FedProx's μ
    kappa: float = 0.9  # signature EMA coefficient (R5; the paper does not report it)
    distance: str = "clipped_cosine"  # R1: clip(1 − cos, 0, 1); or (1 − cos)/2
    decay: str = "power"  # R6: ρ^a; or constant ρ; or ρ^(a−1)
    gate: str = "proxy"  # proxy (the real gate) | off (age cap + quota only) | random
    gate_prob: float = 0.2  # gate=random: firing probability
    proxy_batches: int = 5  # at most this many proxy batches
    proxy_batch_size: int = 64
    proxy_mode: str = "train"  # train (the seed) or eval (§6 item 9)
    normalize_signature: bool = False  # unit-normalise p_ref before the EMA (R5 alternative)

    def __post_init__(self) -> None:
        _check_range("tau0", self.tau0, 0.0, 1.0)
        _check_range("tau_min", self.tau_min, 0.0, self.tau0)
        _check_range("gamma", self.gamma, 0.0, 1.0, hi_open=True)
        _check_choice("schedule", self.schedule, DG_SCHEDULES)
        _check_range("max_age", self.max_age, 1)
        _check_range("rho", self.rho, 0.0, 1.0, lo_open=True, hi_open=True)
        _check_range("quota", self.quota, 0.0, 1.0, lo_open=True)
        _check_range("mu", self.mu, 0.0)
        _check_range("kappa", self.kappa, 0.0, 1.0, hi_open=True)
        _check_choice("distance", self.distance, DG_DISTANCES)
        _check_choice("decay", self.decay, DG_DECAYS)
        _check_choice("gate", self.gate, DG_GATES)
        _check_range("gate_prob", self.gate_prob, 0.0, 1.0)
        _check_range("proxy_batches", self.proxy_batches, 1)
        _check_range("proxy_batch_size", self.proxy_batch_size, 1)
        _check_choice("proxy_mode", self.proxy_mode, ("train", "eval"))


@dataclass(frozen=True)
class FedLUARConfig:
    """FedLUAR (ALGORITHMS.md §2.4): δ layers recycled per round, chosen ∝ 1/score."""

    delta: int = 2  # δ; paper: 2 (CNN/FEMNIST), 10 (ResNet-20), 14 (WRN-28-10); must be < |L_rec|
    weighting: str = "samples"  # samples: π_i (FedAvg family) | uniform: 1/|S_t| (reference code)

    def __post_init__(self) -> None:
        _check_range("delta", self.delta, 0)
        _check_choice("weighting", self.weighting, ("samples", "uniform"))


@dataclass(frozen=True)
class FedSteerConfig:
    """FedSteer (ALGORITHMS.md §2.5); defaults are the reference main run."""

    core_size: int = 10  # K, clients whose full pseudo-gradient is cached
    ridge: float = 0.5  # λ of the ridge projection
    warmup: int = 5  # W, rounds of core-set search
    swaps: int = 5  # swap passes of the greedy core-set search
    beta: float = 1.0  # cache refresh h_i <- beta * g_i
    mode: str = "fidelity"  # fidelity: the reference code's oracle warm-up | clean: no oracle

    def __post_init__(self) -> None:
        _check_range("core_size", self.core_size, 1)
        _check_range("ridge", self.ridge, 0.0, lo_open=True)
        _check_range("warmup", self.warmup, 0)
        _check_range("swaps", self.swaps, 0)
        _check_range("beta", self.beta, 0.0, 1.0)
        _check_choice("mode", self.mode, ("fidelity", "clean"))


@dataclass(frozen=True)
class MIFAConfig:
    """MIFA (ALGORITHMS.md §2.6): the server averages every client's last update."""

    init: str = "zero"  # zero: G_i = 0 (fdu_no_wait) | wait: fill all G_i once all were seen (fdu)
    weights: str = "uniform"  # uniform 1/N (official) | samples: α_i = n_i / Σ n

    def __post_init__(self) -> None:
        _check_choice("init", self.init, ("zero", "wait"))
        _check_choice("weights", self.weights, ("uniform", "samples"))


@dataclass(frozen=True)
class FedStaleConfig:
    """FedVARP (β = 1, §2.7) and FedStale (β ∈ [0, 1], §2.8)."""

    beta: float = 0.5  # FedStale's mix; published runs 0.5 (FedVARP ignores it: β = 1)
    probs: str = "known"  # known p_i from the participation model | estimated online (FedAU)
    weights: str = "samples"  # α_i = n_i / Σ n | uniform 1/N

    def __post_init__(self) -> None:
        _check_range("beta", self.beta, 0.0, 1.0)
        _check_choice("probs", self.probs, ("known", "estimated"))
        _check_choice("weights", self.weights, ("samples", "uniform"))


@dataclass(frozen=True)
class ScaffoldConfig:
    """SCAFFOLD option II (ALGORITHMS.md §2.9); the server lr is ``fl.server_lr``."""

    weighting: str = "uniform"  # uniform 1/|S_t| (paper) | samples: π_i
    # K in c_i⁺ = c_i − c + (w_t − y)/(K η_l): momentum = the plain-SGD-equivalent step count
    # of heavy-ball SGD (K when momentum is 0) | raw = the optimizer steps taken
    steps: str = "momentum"

    def __post_init__(self) -> None:
        _check_choice("weighting", self.weighting, ("uniform", "samples"))
        _check_choice("steps", self.steps, ("momentum", "raw"))


@dataclass(frozen=True)
class EF21Config:
    """EF21 with partial participation (ALGORITHMS.md §2.11.2); Top-K ratio from method."""

    variant: str = "pp"  # pp: w += Σ_all α_j g_j (memory) | s: w += Σ_selected π_i g_i
    init: str = "zero"  # zero: first message TopK(Δ) | dense: first message Δ, charged B0

    def __post_init__(self) -> None:
        _check_choice("variant", self.variant, ("pp", "s"))
        _check_choice("init", self.init, ("zero", "dense"))


@dataclass(frozen=True)
class LAQConfig:
    """LAQ adapted to FL rounds (ALGORITHMS.md §2.12)."""

    # b, bits per coordinate (2^b levels). The official 4 makes the quantisation-error term
    # 3(ε + ε̂) exceed the innovation of whole local-training updates, so every later
    # participation is lazy and the replayed stale Q_i drive digits to chance; 8 does not
    bits: int = 8
    history: int = 10  # D, past model changes in the skip threshold
    xi: float = 0.8  # Σ_d ξ_d; ξ_d = xi / min(D, rounds so far)
    c_thr: float = 0.01  # replaces 1/(α²M²): pseudo-updates are lr-scaled, ≈ 1/m²
    max_clock: int = 10  # t̄: force an upload after this many skipped participations
    weights: str = "samples"  # α_j of the server aggregate: samples | uniform

    def __post_init__(self) -> None:
        _check_range("bits", self.bits, 1, 16)
        _check_range("history", self.history, 1)
        _check_range("xi", self.xi, 0.0)
        _check_range("c_thr", self.c_thr, 0.0)
        _check_range("max_clock", self.max_clock, 1)
        _check_choice("weights", self.weights, ("samples", "uniform"))


# methods whose uplink is a plain Top-K message, so Fed-EF can wrap it
EF_METHODS = ("fedavg", "fedprox", "fedadam", "dg_fedreuse", "mifa", "fedvarp", "fedstale")


@dataclass(frozen=True)
class MethodConfig:
    """The algorithm and its knobs; each method reads only its own block."""

    name: str = "fedavg"  # one of METHODS
    topk_ratio: float = 1.0  # r in (0, 1]: per-tensor Top-K keep ratio of the uplink; 1 = dense
    error_feedback: bool = False  # Fed-EF on the Top-K uplink (§2.11.1): e_i kept per client
    fedprox: FedProxConfig = field(default_factory=FedProxConfig)
    fedadam: FedAdamConfig = field(default_factory=FedAdamConfig)
    dg: DGConfig = field(default_factory=DGConfig)
    fedluar: FedLUARConfig = field(default_factory=FedLUARConfig)
    fedsteer: FedSteerConfig = field(default_factory=FedSteerConfig)
    mifa: MIFAConfig = field(default_factory=MIFAConfig)
    fedstale: FedStaleConfig = field(default_factory=FedStaleConfig)
    scaffold: ScaffoldConfig = field(default_factory=ScaffoldConfig)
    ef21: EF21Config = field(default_factory=EF21Config)
    laq: LAQConfig = field(default_factory=LAQConfig)

    def __post_init__(self) -> None:
        _check_choice("name", self.name, METHODS)
        _check_range("topk_ratio", self.topk_ratio, 0.0, 1.0, lo_open=True)
        if self.error_feedback and self.name not in EF_METHODS:
            raise ConfigError(
                "error_feedback",
                f"true is not available with method {self.name!r}; allowed with: "
                + ", ".join(EF_METHODS),
            )
        if self.name in ("laq", "fedsteer") and self.topk_ratio != 1.0:
            raise ConfigError(
                "topk_ratio",
                f"{self.topk_ratio!r} with method {self.name!r}, whose uplink is "
                + ("quantized" if self.name == "laq" else "the dense pseudo-gradient")
                + "; allowed: 1.0",
            )


@dataclass(frozen=True)
class EngineConfig:
    """Which backend runs client work. Not part of the run id: engines give identical results."""

    backend: str = "ray"  # ray (client-worker actors + server actor) or local (one process)
    ray_address: str | None = None  # None: $RAY_ADDRESS if set, else start a local Ray
    num_workers: int = 0  # client-worker actors; 0 = sized from the cluster's resources
    cpu_per_worker: float = 1.0  # num_cpus of a worker actor when it runs on CPU
    gpu_fraction: float = 0.25  # num_gpus of a worker actor when CUDA is used
    device: str = "auto"  # auto: CUDA when the cluster has GPUs, else CPU

    def __post_init__(self) -> None:
        _check_choice("backend", self.backend, BACKENDS)
        _check_range("num_workers", self.num_workers, 0)
        _check_range("cpu_per_worker", self.cpu_per_worker, 0.0, lo_open=True)
        _check_range("gpu_fraction", self.gpu_fraction, 0.0, 1.0, lo_open=True)
        _check_choice("device", self.device, DEVICES)


@dataclass(frozen=True)
class RunConfig:
    """One FL run: what a Tune trial or ``reuse-ray run`` executes."""

    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    fl: FLConfig = field(default_factory=FLConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    results_dir: str = "results"

    def __post_init__(self) -> None:
        _check_range("seed", self.seed, 0)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    @property
    def run_id(self) -> str:
        """Stable id of (config, seed): results location and engine do not enter it."""
        payload = {k: v for k, v in flatten(self).items() if not _is_non_identity(k)}
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        return f"{self.method.name}-{digest[:12]}"


def _is_non_identity(key: str) -> bool:
    return key == "results_dir" or key.startswith("engine.") or key == "data.root"


# --------------------------------------------------------------------------- dict <-> dataclass


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(path: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(path, inner[0], value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping of fields, got {value!r}")
        return from_dict(tp, value, path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected a list, got {value!r}")
        return tuple(_coerce(path, args[0], v) for v in value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            if isinstance(value, str):
                try:
                    return float(value)  # YAML reads "1e-4" without a dot as a string
                except ValueError:
                    pass
            raise ConfigError(path, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if isinstance(value, bool):
            raise ConfigError(
                path, f"expected a string, got {value!r}; YAML reads unquoted off/on/yes/no as "
                "booleans, so quote the word (e.g. 'off')",
            )  # fmt: skip
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {path}")


T = typing.TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any], path: str = "") -> T:
    """Build a config dataclass from a plain mapping, rejecting unknown fields."""
    hints = _field_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise ConfigError(full, f"unknown field; allowed: {', '.join(names)}")
        kwargs[key] = _coerce(full, hints[key], value)
    try:
        return cls(**kwargs)
    except ConfigError as err:
        if path and not err.field.startswith(path + "."):
            raise err.prefixed(path) from None
        raise


def to_dict(cfg: Any) -> dict[str, Any]:
    """Nested plain mapping of a config (tuples become lists), YAML-safe."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v):
            out[f.name] = to_dict(v)
        elif isinstance(v, tuple):
            out[f.name] = list(v)
        else:
            out[f.name] = v
    return out


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted-key mapping of every leaf field, in declaration order."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(v):
            out.update(flatten(v, key + "."))
        elif isinstance(v, tuple):
            out[key] = list(v)
        else:
            out[key] = v
    return out


def flat_field_types(cls: type = RunConfig, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> Python type for every leaf of a config class (for the Parquet schema)."""
    out: dict[str, Any] = {}
    hints = _field_types(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            out.update(flat_field_types(tp, key + "."))
        else:
            out[key] = tp
    return out


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c = value`` inside nested dicts, creating levels as needed."""
    parts = dotted.split(".")
    cur = data
    for p in parts[:-1]:
        nxt = cur.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(dotted, f"'{p}' is not a block of fields")
        cur = nxt
    cur[parts[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set a.b=value`` overrides; values are parsed with yaml.safe_load."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "override must look like a.b=value")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw)
        if isinstance(value, bool) and raw.strip().lower() not in ("true", "false"):
            value = raw.strip()  # off/on/yes/no on the command line mean the word
        set_dotted(data, key.strip(), value)
    return data


def load_config_dict(path: str | Path) -> dict[str, Any]:
    """Read a run config YAML; a sweep file's ``base:`` block is the run config."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file not found: {p}")
    raw = yaml.safe_load(p.read_text()) or {}
    if not isinstance(raw, dict):
        raise ConfigError("<root>", f"{p} must hold a mapping of fields")
    if "base" in raw:
        base = raw["base"] or {}
        if not isinstance(base, dict):
            raise ConfigError("base", "expected a mapping of run-config fields")
        return dict(base)
    return raw


def load_run_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Load, override and validate a run config."""
    data = load_config_dict(path)
    apply_overrides(data, overrides or [])
    return from_dict(RunConfig, data)
