"""TensorBoard scalars by FL round: val_acc only on evaluation rounds, steps are rounds."""

from __future__ import annotations

import struct
from pathlib import Path

from conftest import small_config

from reuse_ray.runner import run_fl


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a run folder's event files: tag -> [(step, value)] (TFRecord framing:
    u64 length, u32 crc, payload, u32 crc)."""
    from tensorboardX.proto import event_pb2  # here, not at collection

    out: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(folder.glob("events.out.tfevents.*")):
        data, pos = f.read_bytes(), 0
        while pos < len(data):
            (n,) = struct.unpack_from("<Q", data, pos)
            ev = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + n])
            pos += 12 + n + 4
            for v in ev.summary.value:
                out.setdefault(v.tag, []).append((ev.step, v.simple_value))
    return out


def test_scalars_are_by_round_and_validation_only_on_evaluation_rounds(tmp_path):
    cfg = small_config(
        tmp_path,
        method__name="dg_fedreuse",
        fl__rounds=5,
        fl__eval_every=2,
        method__dg__tau0=0.3,
        method__dg__tau_min=0.2,
    )
    assert run_fl(cfg).status == "finished"
    folder = Path(cfg.results_dir) / "tensorboard" / "dg_fedreuse-seed7"
    scalars = read_scalars(folder)
    assert [s for s, _ in scalars["val/acc"]] == [1, 2, 4, 5]  # round 1, every 2, and T
    for tag in ("train/loss", "bytes/cum_up_restricted_MB", "clients/fresh", "time/round_s"):
        assert [s for s, _ in scalars[tag]] == [1, 2, 3, 4, 5], tag
    up = [v for _, v in scalars["bytes/cum_up_measured_MB"]]
    assert up == sorted(up) and up[0] > 0  # cumulative
    assert "gate/firing_rate" in scalars  # DG has a gate
    assert all(0.0 <= v <= 1.0 for _, v in scalars["gate/firing_rate"])


def test_a_round_no_client_joined_logs_no_nan(tmp_path, capfd):
    """Under adversarial participation a round may have no client: its mean loss and saving
    are NaN in the table, and TensorBoard gets no point for them (nor prints a warning)."""
    import math

    from reuse_ray.results import read_table

    cfg = small_config(tmp_path, fl__participation="adversarial", fl__rounds=3)
    assert run_fl(cfg).status == "finished"
    rounds = read_table(cfg.results_dir, "rounds")
    empty = rounds.loc[rounds["num_fresh"] + rounds["num_reused"] == 0, "round"].tolist()
    assert empty, "no empty round: pick a seed whose schedule has one"
    folder = next((Path(cfg.results_dir) / "tensorboard").iterdir())
    scalars = read_scalars(folder)
    assert all(math.isfinite(v) for points in scalars.values() for _, v in points)
    assert all(step not in empty for step, _ in scalars["train/loss"])
    assert [s for s, _ in scalars["clients/fresh"]] == [1, 2, 3]
    assert "NaN or Inf" not in capfd.readouterr().out
