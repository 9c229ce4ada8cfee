"""Workload W on Flower 1.42's simulation runtime: the peer arm of ``engine_overhead.py``.

The same data, partition, client schedule, network and local training as every other arm
(``workload_w.py``): a ``ClientApp`` trains with ``workload_w.train_client``, the server runs
Flower's message-API ``FedAvg`` with its node sampling replaced by reuse_ray's keyed schedule
(node ids are mapped to partition ids once, by a query to every node, before round 1), and
the global model is evaluated centrally on the validation split after every round
(``evaluate_fn``; the round-0 evaluation Flower offers is skipped, as no other arm does it).
Two Ray actors of 1 CPU each train the clients, Flower's usual simulation setting on a 2-core
machine. Data and the model are built once per actor process and cached.

flwr 1.42 pins ray 2.55.1, so it runs from its own virtual environment that borrows the
machine's torch (and sees this checkout through ``PYTHONPATH``)::

    python -m venv --system-site-packages .venv-flower
    .venv-flower/bin/pip install "flwr[simulation]==1.42.0"
    PYTHONPATH=. .venv-flower/bin/python benchmarks/peer_flower.py --model cnn_valid --rounds 6

It prints ``RESULT {...}``: the wall-clock time round 1 started and the time each round's
evaluation finished (``time.time()``), which ``engine_overhead.py`` turns into start-up, first
round and s/round.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import workload_w as W  # noqa: E402
from flwr.app import (  # noqa: E402
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

_CACHE: dict[str, object] = {}


def _cached(model_name: str, samples: int):
    """(workload, model) of this process, built on first use."""
    key = f"{model_name}/{samples}"
    if key not in _CACHE:
        w = W.load(model_name, samples)
        _CACHE[key] = (w, w.model())
    return _CACHE[key]


client_app = ClientApp()


@client_app.query()
def query(msg: Message, context: Context) -> Message:
    """This node's partition id, so the server can follow the keyed schedule."""
    pid = int(context.node_config["partition-id"])
    return Message(RecordDict({"id": ConfigRecord({"partition": pid})}), reply_to=msg)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    cfg = msg.content["config"]
    w, model = _cached(str(cfg["model"]), int(cfg["samples"]))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    n = W.train_client(model, w, int(context.node_config["partition-id"]), int(cfg["server-round"]))
    reply = RecordDict(
        {"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord({"num-examples": n})}
    )
    return Message(reply, reply_to=msg)


class ScheduledFedAvg(FedAvg):
    """Flower's FedAvg, training the clients ``workload_w.schedule(t)`` names each round."""

    def __init__(self, stamps: dict):
        super().__init__(fraction_train=1.0, fraction_evaluate=0.0)
        self.stamps = stamps
        self.node_of: dict[int, int] = {}

    def _map_nodes(self, grid: Grid) -> None:
        nodes = list(grid.get_node_ids())
        while len(nodes) < W.CLIENTS:
            time.sleep(0.1)
            nodes = list(grid.get_node_ids())
        asks = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
        for reply in grid.send_and_receive(asks):
            part = int(reply.content["id"]["partition"])
            self.node_of[part] = reply.metadata.src_node_id

    def configure_train(self, server_round, arrays, config, grid):
        if not self.node_of:
            self._map_nodes(grid)
        if server_round == 1:
            self.stamps["start1"] = time.time()
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(
            record, [self.node_of[c] for c in W.schedule(server_round)], MessageType.TRAIN
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn_valid", choices=sorted(W.HIDDEN))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--actors", type=int, default=2)
    args = ap.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    stamps: dict = {"ends": []}
    w, model = _cached(args.model, args.samples)

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        if server_round == 0:
            return None
        model.load_state_dict(arrays.to_torch_state_dict())
        acc, loss = W.evaluate_state(model, w)
        stamps["ends"].append(time.time())
        stamps.setdefault("val_acc", []).append(acc)
        return MetricRecord({"val_acc": acc, "val_loss": loss})

    server_app = ServerApp()

    @server_app.main()
    def server_main(grid: Grid, context: Context) -> None:
        strategy = ScheduledFedAvg(stamps)
        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(w.model().state_dict()),
            num_rounds=args.rounds,
            train_config=ConfigRecord({"model": args.model, "samples": args.samples}),
            evaluate_fn=evaluate_fn,
        )

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=W.CLIENTS,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {
                "num_cpus": args.actors,
                "include_dashboard": False,
                "log_to_driver": False,
            },
        },
    )
    print("RESULT " + json.dumps(stamps), flush=True)


if __name__ == "__main__":
    main()
