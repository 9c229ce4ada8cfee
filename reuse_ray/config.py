"""The run configuration's schema: frozen dataclasses, checked on construction.

Every block is a frozen dataclass; the whole run is one :class:`RunConfig`. Each block checks its
values when it is built (:mod:`reuse_ray.checks`): a value out of its range raises
:class:`ConfigError` naming the dotted field and what is allowed. Reading YAML, ``--set``
overrides and plain mappings into these classes is :mod:`reuse_ray.configio`'s job.

Protocol defaults follow methods: The paper's protocol (DG-FedReuse protocol): 50 clients, 10 per
round, Dirichlet 0.5, 3 local epochs, batch 128, SGD lr 0.05, momentum 0.9, weight decay 1e-4.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from dataclasses import dataclass, field
from typing import Any

from .checks import MAX_SEED, ConfigError, check_choice, check_range, ray_address_problem

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
PARTICIPATION = ("uniform", "bernoulli", "two_group", "groups", "adversarial")
PARTITIONS = ("dirichlet", "iid", "shards")
MODELS = ("auto", "cnn", "cnn_valid", "resnet18")
AUGMENTS = ("auto", "none", "crop_flip")
BACKENDS = ("ray", "local")
DEVICES = ("auto", "cpu", "cuda")
SERVER_PROCESSES = ("worker", "own")


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class DataConfig:
    """Dataset choice and splits (methods: The paper's protocol; design: Validation-only search)."""

    name: str = "digits"  # the dataset the run trains, validates and tests on
    root: str | None = None  # data root; None -> $REUSE_RAY_DATA -> ~/.cache/reuse_ray/data
    download: bool = False  # downloads are attempted only when this is true
    val_fraction: float = 0.1  # stratified validation carve-out where no val split exists
    split_seed: int = 0  # fixes val/test carving, independent of the run seed
    image_size: int = 28  # medmnist image size (28, 64, 128, 224)
    synthetic_samples: int = 2000  # synthetic: train+test samples
    synthetic_shape: tuple[int, ...] = (1, 8, 8)  # synthetic: C, H, W
    synthetic_classes: int = 10  # synthetic: number of classes
    synthetic_noise: float = 1.0  # synthetic: noise std around each class template
    # a fixed stratified subset of about this many training images (after the validation
    # carve-out; every class in proportion, drawn from split_seed); 0: the whole split
    train_subset: int = 0
    # a fixed stratified subset of about this many test images (smoke runs; drawn from
    # split_seed, checked against the split's size when it is read at round T); 0: all of it
    test_subset: int = 0

    def __post_init__(self) -> None:
        check_choice("name", self.name, DATASETS)
        check_range("val_fraction", self.val_fraction, 0.0, 1.0, lo_open=True, hi_open=True)
        check_range("split_seed", self.split_seed, 0, MAX_SEED)
        check_choice("image_size", str(self.image_size), ("28", "64", "128", "224"))
        check_range("synthetic_samples", self.synthetic_samples, 20)
        if len(self.synthetic_shape) != 3 or min(self.synthetic_shape) < 1:
            raise ConfigError(
                "synthetic_shape", f"{self.synthetic_shape!r}; allowed: [C, H, W] >= 1"
            )
        check_range("synthetic_classes", self.synthetic_classes, 2)
        check_range("synthetic_noise", self.synthetic_noise, 0.0)
        check_range("train_subset", self.train_subset, 0)
        check_range("test_subset", self.test_subset, 0)
        if self.root:  # an unknown ~user or an impossible length, refused when the file is read
            from .paths import user_path

            user_path(self.root, "data.root")


@dataclass(frozen=True)
class PartitionConfig:
    """How the training split is spread over clients (methods: The paper's protocol)."""

    kind: str = "dirichlet"  # dirichlet | iid | shards
    alpha: float = 0.5  # Dirichlet concentration
    min_size: int = 10  # every client gets at least this many samples (Dirichlet retries)
    shards_per_client: int = 2  # shards partition

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, PARTITIONS)
        check_range("alpha", self.alpha, 0.0, lo_open=True)
        check_range("min_size", self.min_size, 1)
        check_range("shards_per_client", self.shards_per_client, 1)


@dataclass(frozen=True)
class ModelConfig:
    """Model choice: the shallow CNN (``cnn``, padded; ``cnn_valid``, the classic unpadded MNIST
    CNN) or torchvision ResNet-18 (auto: ResNet-18 for CIFAR)."""

    # auto (ResNet-18 for CIFAR, else cnn), cnn (the paper's shallow CNN), cnn_valid (unpadded:
    # about half its convolution work) or resnet18
    name: str = "auto"
    hidden: int = 128  # width of the CNN's hidden linear layer

    def __post_init__(self) -> None:
        check_choice("name", self.name, MODELS)
        check_range("hidden", self.hidden, 1)


@dataclass(frozen=True)
class TrainConfig:
    """Local training, methods: Conventions."""

    epochs: int = 3  # local epochs over the client's samples each time it trains
    batch_size: int = 128  # local minibatch size
    lr: float = 0.05  # local SGD learning rate
    momentum: float = 0.9  # local SGD momentum (reset every time a client trains)
    weight_decay: float = 1e-4  # local SGD weight decay (L2)
    augment: str = "auto"  # auto: crop+flip for CIFAR, none otherwise
    threads: int = 1  # torch threads for client work; fixed so results do not depend on cores
    amp: bool = True  # autocast on CUDA only; codecs and ledger always see fp32 deltas
    # batch size of validation and test passes (no effect on the numbers)
    eval_batch_size: int = 1024

    def __post_init__(self) -> None:
        check_range("epochs", self.epochs, 1)
        check_range("batch_size", self.batch_size, 1)
        check_range("lr", self.lr, 0.0, lo_open=True)
        check_range("momentum", self.momentum, 0.0, 1.0, hi_open=True)
        check_range("weight_decay", self.weight_decay, 0.0)
        check_choice("augment", self.augment, AUGMENTS)
        check_range("threads", self.threads, 1)
        check_range("eval_batch_size", self.eval_batch_size, 1)


@dataclass(frozen=True)
class FLConfig:
    """The federation: clients, participation and the fixed round budget (design: Runs)."""

    num_clients: int = 50  # N: clients the training split is partitioned over
    clients_per_round: int = 10  # K: clients selected each round (uniform participation)
    rounds: int = 30  # final round T, fixed in advance; the test split is read once, at T
    eval_every: int = 5  # validation at round 1, every eval_every rounds and at T
    server_lr: float = 1.0  # eta_s of the FedAvg family (methods: Conventions)
    participation: str = "uniform"  # uniform | bernoulli | two_group | groups | adversarial
    two_group_a: float = 5.0  # two_group: weight 1+a on the first half of the ids
    group_probs: tuple[float, ...] = (1.0, 0.5)  # groups: p of each contiguous block of ids
    # adversarial (MIFA): p_i = p_min + (p_max − p_min)·min_label_i/(K − 1)
    avail_min: float = 0.1  # adversarial participation: the lowest availability probability
    avail_max: float = 1.0  # adversarial participation: the highest availability probability
    # uplink levels f (design: Readings at uplink levels): a budget of f·T·K·B0 bytes each
    # (dense FedAvg's uplink over the planned rounds); the run reads the model at the last
    # round whose cumulative uplink stays within it, in both ledgers: validation, and the test
    # split once per level where the stage may read it (table ``levels``)
    uplink_levels: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_choice("participation", self.participation, PARTICIPATION)
        check_range("two_group_a", self.two_group_a, 0.0)
        check_range("avail_min", self.avail_min, 0.0, 1.0, lo_open=True)
        check_range("avail_max", self.avail_max, self.avail_min, 1.0)
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
        check_range("num_clients", self.num_clients, 1)
        check_range("clients_per_round", self.clients_per_round, 1)
        check_range("rounds", self.rounds, 1)
        check_range("eval_every", self.eval_every, 1)
        check_range("server_lr", self.server_lr, 0.0, lo_open=True)
        if any(not 0.0 < f <= 1.0 for f in self.uplink_levels):
            raise ConfigError(
                "uplink_levels",
                f"{list(self.uplink_levels)!r}; allowed: fractions in (0, 1] of dense FedAvg's "
                "uplink over the planned rounds",
            )
        if self.clients_per_round > self.num_clients:
            raise ConfigError(
                "clients_per_round",
                f"{self.clients_per_round} is more than num_clients={self.num_clients}; "
                f"allowed: [1, {self.num_clients}]",
            )


@dataclass(frozen=True)
class MethodConfig:
    """The method and the uplink knobs every method shares; its own knobs are ``params``.

    In YAML, ``params`` is the block named after the method (``method.dg`` for dg_fedreuse, see
    each method module's ``register``). A block of another method is an error: it would change
    nothing but the run id.
    """

    name: str = "fedavg"  # a registered method (reuse_ray/algorithms/registry.py)
    topk_ratio: float = 1.0  # r in (0, 1]: per-tensor Top-K keep ratio of the uplink; 1 = dense
    error_feedback: bool = False  # Fed-EF on the Top-K uplink: e_i kept per client
    module: str | None = None  # a method outside the package: dotted module or .py path
    # the method's own config block (its registered dataclass), or None; read from the block
    # named after the method, not a YAML key of its own (the reference leaves it out)
    params: Any = field(default=None, metadata={"yaml": False})

    def __post_init__(self) -> None:
        from .algorithms.registry import get_method, load_method_module

        check_range("topk_ratio", self.topk_ratio, 0.0, 1.0, lo_open=True)
        if self.module is not None:
            names = load_method_module(self.module)
            if self.name not in names:
                raise ConfigError(
                    "name",
                    f"{self.name!r} is not registered by method.module {self.module!r}, which "
                    f"registers {', '.join(names)}",
                )
        try:
            spec = get_method(self.name)
        except KeyError as err:
            raise ConfigError("name", str(err.args[0])) from None
        if spec.config is not None and not isinstance(self.params, spec.config):
            if self.params is not None:
                raise ConfigError(spec.block, f"expected a {spec.config.__name__} block")
            object.__setattr__(self, "params", spec.config())
        if spec.config is None and self.params is not None:
            raise ConfigError("params", f"method {self.name!r} has no config block")
        if self.error_feedback and not spec.error_feedback:
            allowed = [n for n in _method_names() if _spec(n).error_feedback]
            raise ConfigError(
                "error_feedback",
                f"true is not available with method {self.name!r}; allowed with: "
                + ", ".join(allowed),
            )
        if not spec.sparse_uplink and self.topk_ratio != 1.0:
            raise ConfigError(
                "topk_ratio",
                f"{self.topk_ratio!r} with method {self.name!r}, whose uplink is not a Top-K "
                "message; allowed: 1.0",
            )

    @property
    def block(self) -> str | None:
        """The YAML key of this method's own block (None when it has none)."""
        return _spec(self.name).block

    def __getattr__(self, name: str) -> Any:
        """``cfg.method.<block>`` reads the method's own block, as the YAML spells it."""
        params = self.__dict__.get("params")
        if not name.startswith("_") and params is not None and name == self.block:
            return params
        raise AttributeError(f"method config has no field or block {name!r}")


def _spec(name: str):
    from .algorithms.registry import get_method

    return get_method(name)


def _method_names() -> tuple[str, ...]:
    from .algorithms.registry import method_names

    return method_names()


@dataclass(frozen=True)
class EngineConfig:
    """Which backend runs client work. Not part of the run id: engines give identical results."""

    backend: str = "ray"  # ray (client-worker actors and a server) or local (one process)
    ray_address: str | None = None  # None: $RAY_ADDRESS if set, else start a local Ray
    num_workers: int = 0  # client-worker actors; 0 = sized from the cluster's resources
    cpu_per_worker: float = 1.0  # num_cpus of a worker actor when it runs on CPU
    gpu_fraction: float = 0.25  # num_gpus of a worker actor when CUDA is used
    device: str = "auto"  # auto: CUDA when the cluster has GPUs, else CPU
    # rounds between snapshots of the server actor's state (0: none). When the server actor
    # dies, a new one starts from the last snapshot and replays the rounds since (bit-identical)
    server_snapshot_every: int = 1
    # where the Ray engine's server lives: worker = in client worker 0's process (its calls
    # come between rounds, when that worker is idle; one torch process fewer, about 0.4 GB),
    # own = an actor process of its own. The same numbers either way
    server_process: str = "worker"
    # train the clients of a round together (one batched pass over stacked parameters), in
    # groups of at most vectorize_group clients taken in client-id order. Equal to the
    # per-client loop within float tolerance, not bit for bit, so a vectorized run has its own
    # run id; both engines form the same groups and give identical results
    vectorize: bool = False
    vectorize_group: int = 16  # vectorize: at most this many clients trained as one stacked batch
    # vectorize: every step at the group's full shape (all its clients, full batches; a client
    # without steps left is masked), so a step is one fixed computation: on CUDA captured once
    # a group as a CUDA graph and replayed, without per-kernel launches from Python; elsewhere
    # run as it is. It rounds differently from the unpadded step, so such a run has its own id
    vectorize_graphs: bool = False
    # keep convolution weights and activations channels-last (NHWC): oneDNN's CPU kernels and
    # GPU tensor cores are faster on it. The convolutions round differently from the default
    # channels-first layout, so such a run has its own run id; each layout is deterministic
    # and both engines give identical results with either
    channels_last: bool = False

    def __post_init__(self) -> None:
        check_choice("backend", self.backend, BACKENDS)
        if self.ray_address is not None and (problem := ray_address_problem(self.ray_address)):
            raise ConfigError("ray_address", problem)
        if self.channels_last and self.vectorize:
            raise ConfigError(
                "channels_last",
                "applies to the per-client loop; allowed with engine.vectorize: false only",
            )
        check_range("vectorize_group", self.vectorize_group, 1)
        if self.vectorize_graphs and not self.vectorize:
            raise ConfigError(
                "vectorize_graphs",
                "applies to vectorized clients; allowed with engine.vectorize: true only",
            )
        check_range("num_workers", self.num_workers, 0)
        check_range("cpu_per_worker", self.cpu_per_worker, 0.0, lo_open=True)
        check_range("gpu_fraction", self.gpu_fraction, 0.0, 1.0, lo_open=True)
        check_choice("device", self.device, DEVICES)
        check_range("server_snapshot_every", self.server_snapshot_every, 0)
        check_choice("server_process", self.server_process, SERVER_PROCESSES)


@dataclass(frozen=True)
class RunConfig:
    """One FL run: what a Tune trial or ``reuse-ray run`` executes."""

    # the run's seed: partitions, client schedules, shuffles and initial weights (keyed streams)
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    fl: FLConfig = field(default_factory=FLConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # a local path or a pyarrow filesystem URI; relative (and "") below the results root,
    # $REUSE_RAY_RESULTS or ~/reuse_ray_results (reuse_ray.results.storage.anchored)
    results_dir: str = ""

    def __post_init__(self) -> None:
        check_range("seed", self.seed, 0, MAX_SEED)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    @property
    def run_id(self) -> str:
        """Stable id of (config, seed): results location and engine do not enter it."""
        payload = {k: v for k, v in flatten(self).items() if not _is_non_identity(k)}
        if not self.data.train_subset:  # added later: ids of whole-split runs stay as they were
            payload.pop("data.train_subset", None)
        if not self.data.test_subset:
            payload.pop("data.test_subset", None)
        if not self.fl.uplink_levels:
            payload.pop("fl.uplink_levels", None)
        if self.engine.vectorize:
            payload["engine.vectorize_group"] = self.engine.vectorize_group
        if self.engine.vectorize_graphs:
            payload["engine.vectorize_graphs"] = True
        if self.engine.channels_last:
            payload["engine.channels_last"] = True
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        return f"{self.method.name}-{digest[:12]}"


def _is_non_identity(key: str) -> bool:
    """Keys that do not change a run's numbers. ``engine.vectorize``,
    ``engine.vectorize_graphs`` and ``engine.channels_last`` do (rounding):
    :meth:`RunConfig.run_id` keeps them when on."""
    return key == "results_dir" or key.startswith("engine.") or key == "data.root"


# --------------------------------------------------------------------------- dataclass -> dict


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _items(cfg: Any) -> list[tuple[str, Any]]:
    """(key, value) of a config's fields as YAML writes them: a method's ``params`` appear
    under the method's block name."""
    out = []
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(cfg, MethodConfig) and f.name == "params":
            if v is not None:
                out.append((cfg.block, v))
            continue
        out.append((f.name, v))
    return out


def to_dict(cfg: Any) -> dict[str, Any]:
    """Nested plain mapping of a config (tuples become lists), YAML-safe."""
    out: dict[str, Any] = {}
    for name, v in _items(cfg):
        if dataclasses.is_dataclass(v):
            out[name] = to_dict(v)
        elif isinstance(v, tuple):
            out[name] = list(v)
        else:
            out[name] = v
    return out


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted-key mapping of every leaf field, in declaration order."""
    out: dict[str, Any] = {}
    for name, v in _items(cfg):
        key = f"{prefix}{name}"
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
    hints = field_types(cls)
    if cls is MethodConfig:  # the shared fields, then every registered method's block
        from .algorithms.registry import config_blocks

        hints = {k: v for k, v in hints.items() if k != "params"} | config_blocks()
    for name, tp in hints.items():
        key = f"{prefix}{name}"
        if dataclasses.is_dataclass(tp):
            out.update(flat_field_types(tp, key + "."))
        else:
            out[key] = tp
    return out
