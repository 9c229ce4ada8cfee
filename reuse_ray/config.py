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
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError
from .yamlio import load_yaml_mapping, parse_yaml

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


MAX_SEED = 2**63 - 1  # seeds are int64 in Parquet and in numpy's SeedSequence entropy


class ConfigError(UserError):
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


FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32 (torch.finfo(torch.float32).max)

RAY_ADDRESS_FORMS = "auto, local, host:port (a head node's GCS) or ray://host[:port] (Ray Client)"


def ray_address_problem(address: str) -> str | None:
    """Why ``address`` is not one Ray can connect to (None when it is): ``auto``, ``local``,
    ``host:port`` or ``ray://host[:port]``, the forms ``ray.init`` takes."""
    if address in ("auto", "local"):
        return None
    if address.startswith(("http://", "https://")):
        return (f"{address!r} is a dashboard address (what `ray job submit --address` takes); "
                f"allowed here: {RAY_ADDRESS_FORMS}")  # fmt: skip
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep:  # no port: only a Ray Client address may omit it
        host, port = rest, None
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 host in brackets
    if not host or any(c in host for c in "/ ?#@") or (port is None and not client):
        return f"{address!r}; allowed: {RAY_ADDRESS_FORMS}"
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        return f"{address!r}: port {port!r} is not a number in 1..65535"
    return None


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, f"unknown value {value!r}; allowed: {', '.join(allowed)}")


# the checks a method module's config block uses (see reuse_ray/algorithms/registry.py)
check_range = _check_range
check_choice = _check_choice


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
        _check_range("split_seed", self.split_seed, 0, MAX_SEED)
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
    """Model choice: the shallow CNN (``cnn``, padded; ``cnn_valid``, the classic unpadded MNIST
    CNN) or torchvision ResNet-18 (auto: ResNet-18 for CIFAR)."""

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
class MethodConfig:
    """The method and the uplink knobs every method shares; its own knobs are ``params``.

    In YAML, ``params`` is the block named after the method (``method.dg`` for dg_fedreuse, see
    each method module's ``register``). A block of another method is an error: it would change
    nothing but the run id.
    """

    name: str = "fedavg"  # a registered method (reuse_ray/algorithms/registry.py)
    topk_ratio: float = 1.0  # r in (0, 1]: per-tensor Top-K keep ratio of the uplink; 1 = dense
    error_feedback: bool = False  # Fed-EF on the Top-K uplink (§2.11.1): e_i kept per client
    module: str | None = None  # a method outside the package: dotted module or .py path
    params: Any = None  # the method's own config block (its registered dataclass), or None

    def __post_init__(self) -> None:
        from .algorithms.registry import get_method

        _check_range("topk_ratio", self.topk_ratio, 0.0, 1.0, lo_open=True)
        if self.module is not None:
            _load_method_module(self.module)
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


def _load_method_module(ref: str) -> None:
    from .algorithms.registry import load_module

    try:
        load_module(ref)
    except FileNotFoundError as err:
        raise ConfigError("module", str(err).split(": ", 1)[-1]) from None
    except ImportError as err:
        raise ConfigError("module", f"cannot import {ref!r}: {err}") from None


def _spec(name: str):
    from .algorithms.registry import get_method

    return get_method(name)


def _method_names() -> tuple[str, ...]:
    from .algorithms.registry import method_names

    return method_names()


def method_from_dict(data: dict[str, Any], path: str = "method") -> MethodConfig:
    """Build :class:`MethodConfig` from YAML: the shared fields and the named method's block."""
    from .algorithms.registry import config_blocks

    data = dict(data)
    shared = {f.name for f in dataclasses.fields(MethodConfig)} - {"params"}
    if "params" in data:
        raise ConfigError(f"{path}.params", "not a YAML field; give the method's own block")
    if data.get("module") is not None:
        if not isinstance(data["module"], str):
            raise ConfigError(f"{path}.module", f"expected a string, got {data['module']!r}")
        try:
            _load_method_module(data["module"])
        except ConfigError as err:
            raise err.prefixed(path) from None
    name = data.get("name", "fedavg")
    if not isinstance(name, str):
        raise ConfigError(f"{path}.name", f"expected a string, got {name!r}")
    try:
        spec = _spec(name)
    except KeyError as err:
        raise ConfigError(f"{path}.name", str(err.args[0])) from None
    blocks = config_blocks()
    params = None
    for key in list(data):
        if key in shared:
            continue
        if key == spec.block:
            block = data.pop(key)
            if block is None:
                block = {}
            if not isinstance(block, dict):
                raise ConfigError(f"{path}.{key}", f"expected a mapping of fields, got {block!r}")
            params = from_dict(spec.config, block, f"{path}.{key}")
        elif key in blocks:
            raise ConfigError(
                f"{path}.{key}",
                f"a block of method(s) {', '.join(_block_owners(key))}, but {path}.name is "
                f"{name!r}; remove it" + (f" (this method's block is {path}.{spec.block})"
                                          if spec.block else ""),
            )  # fmt: skip
        else:
            allowed = sorted(shared) + ([spec.block] if spec.block else [])
            raise ConfigError(f"{path}.{key}", f"unknown field; allowed: {', '.join(allowed)}")
    hints = _field_types(MethodConfig)
    kwargs = {k: _coerce(f"{path}.{k}", hints[k], v) for k, v in data.items() if k in shared}
    try:
        return MethodConfig(**kwargs, params=params)
    except ConfigError as err:
        if not err.field.startswith(path + "."):
            raise err.prefixed(path) from None
        raise


def _block_owners(block: str) -> list[str]:
    from .algorithms.registry import block_owners

    return block_owners(block)


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
    vectorize_group: int = 16
    # keep convolution weights and activations channels-last (NHWC): oneDNN's CPU kernels and
    # GPU tensor cores are faster on it. The convolutions round differently from the default
    # channels-first layout, so such a run has its own run id; each layout is deterministic
    # and both engines give identical results with either
    channels_last: bool = False

    def __post_init__(self) -> None:
        _check_choice("backend", self.backend, BACKENDS)
        if self.ray_address is not None and (problem := ray_address_problem(self.ray_address)):
            raise ConfigError("ray_address", problem)
        if self.channels_last and self.vectorize:
            raise ConfigError("channels_last", "applies to the per-client loop; allowed with "
                              "engine.vectorize: false only")  # fmt: skip
        _check_range("vectorize_group", self.vectorize_group, 1)
        _check_range("num_workers", self.num_workers, 0)
        _check_range("cpu_per_worker", self.cpu_per_worker, 0.0, lo_open=True)
        _check_range("gpu_fraction", self.gpu_fraction, 0.0, 1.0, lo_open=True)
        _check_choice("device", self.device, DEVICES)
        _check_range("server_snapshot_every", self.server_snapshot_every, 0)
        _check_choice("server_process", self.server_process, SERVER_PROCESSES)


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
    # a local path or a pyarrow filesystem URI; relative (and "") below the results root,
    # $REUSE_RAY_RESULTS or ~/reuse_ray_results (reuse_ray.results.storage.anchored)
    results_dir: str = ""

    def __post_init__(self) -> None:
        _check_range("seed", self.seed, 0, MAX_SEED)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    @property
    def run_id(self) -> str:
        """Stable id of (config, seed): results location and engine do not enter it."""
        payload = {k: v for k, v in flatten(self).items() if not _is_non_identity(k)}
        if self.engine.vectorize:
            payload["engine.vectorize_group"] = self.engine.vectorize_group
        if self.engine.channels_last:
            payload["engine.channels_last"] = True
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        return f"{self.method.name}-{digest[:12]}"


def _is_non_identity(key: str) -> bool:
    """Keys that do not change a run's numbers. ``engine.vectorize`` and
    ``engine.channels_last`` do (rounding): :meth:`RunConfig.run_id` keeps them when on."""
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
        if tp is MethodConfig:
            return method_from_dict(value, path)
        return from_dict(tp, value, path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected a list, got {value!r}")
        return tuple(_coerce(path, args[0], v) for v in value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}")
        return value
    if tp is int:  # an integral float such as 2.0 is refused too: say 2
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            number = None
            if isinstance(value, str):
                try:
                    number = float(value)  # YAML reads "1e-4" without a dot as a string
                except ValueError:
                    pass
            if number is None:
                raise ConfigError(path, f"expected a number, got {value!r}")
            value = number
        if not math.isfinite(value):
            raise ConfigError(path, f"{value!r} is not a finite number; allowed: finite numbers")
        if abs(value) > FLOAT32_MAX:  # it meets float32 tensors (learning rates, weights …)
            raise ConfigError(path, f"{value!r} is beyond float32's range; allowed: numbers of "
                                    f"magnitude at most {FLOAT32_MAX:.4g}")  # fmt: skip
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
    hints = _field_types(cls)
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
        if not all(part.strip() for part in key.split(".")):
            raise ConfigError(item, "override must look like a.b=value (a field name on each "
                                    "side of every dot)")  # fmt: skip
        value = parse_yaml(raw, f"--set {item}") if raw.strip() else ""
        if isinstance(value, bool) and raw.strip().lower() not in ("true", "false"):
            value = raw.strip()  # off/on/yes/no on the command line mean the word
        set_dotted(data, key.strip(), value)
    return data


SWEEP_KEYS = ("name", "base", "search", "trial", "final", "results_dir", "checkpoint_every")


def load_config_dict(path: str | Path) -> dict[str, Any]:
    """Read a run config YAML; a sweep file's ``base:`` block is the run config."""
    raw = load_yaml_mapping(path, "config file")
    if "base" in raw:
        stray = sorted(k for k in raw if k not in SWEEP_KEYS)
        if stray:
            raise ConfigError(
                stray[0], f"{path} is a sweep file (it has base:), so run-config fields belong "
                "under base:; allowed at its top: " + ", ".join(SWEEP_KEYS),
            )  # fmt: skip
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
