"""Config loading and validation: bad values are rejected with the field and the allowed range."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from reuse_ray.config import ConfigError, RunConfig, flatten, to_dict
from reuse_ray.configio import apply_overrides, from_dict, load_run_config


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ({"method": {"name": "fedfoo"}}, "method.name", "allowed: fedavg, fedprox, fedadam"),
        ({"method": {"topk_ratio": 0.0}}, "method.topk_ratio", "allowed: (0.0, 1.0]"),
        ({"method": {"topk_ratio": 1.5}}, "method.topk_ratio", "allowed: (0.0, 1.0]"),
        ({"train": {"lr": -0.1}}, "train.lr", "allowed: (0.0, inf]"),
        (
            {"fl": {"num_clients": 5, "clients_per_round": 6}},
            "fl.clients_per_round",
            "allowed: [1, 5]",
        ),
        ({"partition": {"alpha": 0.0}}, "partition.alpha", "allowed: (0.0, inf]"),
        ({"partition": {"alpha": -1}}, "partition.alpha", "out of range"),
        ({"data": {"name": "imagenet"}}, "data.name", "allowed: digits, synthetic"),
        ({"data": {"nmae": "digits"}}, "data.nmae", "unknown field; allowed: name, root"),
        ({"bogus": 1}, "bogus", "unknown field"),
        (
            {"method": {"name": "fedadam", "fedadam": {"beta2": 1.0}}},
            "method.fedadam.beta2",
            "allowed: [0.0, 1.0)",
        ),
        ({"fl": {"rounds": "ten"}}, "fl.rounds", "expected an integer"),
        ({"train": {"lr": "fast"}}, "train.lr", "expected a number"),
    ],
)
def test_bad_values_name_the_field_and_allowed_values(data, field, fragment):
    with pytest.raises(ConfigError) as exc:
        from_dict(RunConfig, data)
    assert exc.value.field == field
    assert f"'{field}'" in str(exc.value)
    assert fragment in str(exc.value)


def test_defaults_are_the_paper_protocol():
    cfg = RunConfig()
    assert (cfg.fl.num_clients, cfg.fl.clients_per_round) == (50, 10)
    assert cfg.partition.alpha == 0.5
    t = cfg.train
    assert (t.epochs, t.batch_size, t.lr, t.momentum, t.weight_decay) == (3, 128, 0.05, 0.9, 1e-4)


def test_yaml_roundtrip_overrides_and_sweep_base(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump({"name": "x", "base": {"seed": 3, "method": {"name": "fedprox"}}})
    )
    cfg = load_run_config(
        path, ["method.fedprox.mu=0.01", "fl.rounds=4", "train.weight_decay=1e-3"]
    )
    assert cfg.seed == 3 and cfg.method.name == "fedprox"
    assert cfg.method.fedprox.mu == 0.01 and cfg.fl.rounds == 4
    assert cfg.train.weight_decay == 1e-3
    assert from_dict(RunConfig, to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match="override must look like"):
        apply_overrides({}, ["fl.rounds"])
    # YAML 1.1 reads off/on as booleans: on the command line they mean the word ...
    cfg = load_run_config(
        path, ["method.name=dg_fedreuse", "method.dg.gate=off", "train.amp=false"]
    )
    assert cfg.method.dg.gate == "off" and cfg.train.amp is False
    # ... and in a file an unquoted off gets a hint instead of a puzzle
    with pytest.raises(ConfigError, match="quote the word"):
        from_dict(RunConfig, {"method": {"name": "dg_fedreuse", "dg": {"gate": False}}})


def test_frozen_and_run_id_stable():
    a = from_dict(RunConfig, {"seed": 1, "results_dir": "a"})
    b = from_dict(RunConfig, {"seed": 1, "results_dir": "b"})
    c = from_dict(RunConfig, {"seed": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.seed = 3  # type: ignore[misc]
    assert a.run_id == b.run_id  # where results go is not part of the identity
    assert a.run_id != c.run_id
    assert a.run_id.startswith("fedavg-")
    # only the method's own block enters the flat config (and so the run id)
    assert "method.fedadam.tau" not in flatten(a)
    adam = from_dict(RunConfig, {"method": {"name": "fedadam"}})
    assert flatten(adam)["method.fedadam.tau"] == 1e-3


@pytest.mark.parametrize(
    ("address", "ok"),
    [
        ("auto", True),
        ("local", True),
        ("127.0.0.1:6379", True),
        ("head.example:6379", True),
        ("[::1]:6379", True),
        ("ray://head", True),
        ("ray://head:10001", True),
        ("garbage", False),
        ("head:0", False),
        ("head:65536", False),
        ("head:x", False),
        (":6379", False),
        ("ray://", False),
        ("ray://h:x", False),
        ("http://head:8265", False),
        ("a/b:1", False),
    ],
)
def test_ray_addresses_in_the_forms_ray_init_takes(address, ok):
    from reuse_ray.config import ray_address_problem

    assert (ray_address_problem(address) is None) is ok
    if not ok:
        with pytest.raises(ConfigError, match="engine.ray_address"):
            from_dict(RunConfig, {"engine": {"ray_address": address}})
