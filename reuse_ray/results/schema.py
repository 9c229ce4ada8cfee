"""The Parquet schema of every results table, declared once (design: Ledgers).

Layout of a results directory (one dataset per table, hive-partitioned by method)::

    RESULTS/runs/method=<name>/<run_id>.parquet           one row per run
    RESULTS/rounds/method=<name>/<run_id>.parquet         one row per run × round
    RESULTS/client_events/method=<name>/<run_id>.parquet  one row per run × round × selected client
    RESULTS/clients/method=<name>/<run_id>.parquet        one row per run × client (partition)
    RESULTS/levels/method=<name>/<run_id>.parquet         one row per run × ledger × uplink level
                                                          (runs with ``fl.uplink_levels`` only)

``method`` is the partition column, so it lives in the directory name, not inside the files;
``pandas.read_parquet(RESULTS / "rounds")`` returns it as a column.

Column meanings (bytes are integers):

* ``up_restricted``: the seed's restricted uplink field model (design: Ledgers): Top-K field bytes
  for
  fresh updates, 16 B per reused event.
* ``down_sensitivity``: the seed's dense-downlink sensitivity (design: Ledgers): B0 per selected
  client.
* ``dense_reference``: m_t·B0, the dense-uplink reference of the savings.
* ``up_measured`` / ``down_measured``: lengths of the real serialized messages (headers included).
* ``saving_restricted``: s_t = 1 − U_t/(m_t B0); ``cum_saving_restricted``: S_T (R10);
  ``cum_saving_bidirectional``: the sensitivity saving 1 − (ΣU + Σm B0)/(2 Σm B0) (R11).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping

import pyarrow as pa

from ..config import flat_field_types

TABLES = ("runs", "rounds", "client_events", "clients", "levels", "trials")
PARTITION_COLUMN = "method"

# running: in progress, or its process was killed outright; stopped: a scheduler or a budget
# ended it early (its rows are a prefix of the full run's); interrupted: Ctrl-C or SIGTERM ended
# it (``--resume`` continues it); failed: an error ended it
RUN_STATUS = ("running", "finished", "failed", "diverged", "stopped", "interrupted")
# the decision names of client events: reuse_ray.algorithms.api.DECISIONS (fresh, reused, lazy,
# waiting, oracle, fill)


def _arrow_type(tp: typing.Any) -> pa.DataType:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _arrow_type(inner[0])
    if origin is tuple:  # a list-valued field is one JSON string, so groupby works on it
        return pa.string()
    return {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}[tp]


def config_fields() -> list[pa.Field]:
    """One ``cfg.<dotted>`` column per leaf of RunConfig, every registered method's block
    included (a method registered later, e.g. from ``method.module``, adds its columns)."""
    return [pa.field(f"cfg.{k}", _arrow_type(t)) for k, t in flat_field_types().items()]


RUN_COLUMNS = [
    # the run's id: method and a hash of its config and seed (identical runs share it)
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("seed", pa.int64(), nullable=False),  # the run's seed
    # one of RUN_STATUS
    pa.field("status", pa.string(), nullable=False),
    pa.field("error", pa.string()),  # why a run failed, diverged or was interrupted (one line)
    # run | search | reeval | final (a trials row of searcher none: protocol)
    pa.field("stage", pa.string()),
    # the sweep (or a study's <name>-<workload>) the run belongs to; null for a single run
    pa.field("sweep", pa.string()),
    # the Tune trial that ran it (a run an earlier launch finished, kept by a later one: in
    # runs the trial that computed it, in trials the later launch's)
    pa.field("trial_id", pa.string()),
    # a sweep's final runs: selected-<j>, compare-<j> or a compare entry's own label; a study's
    # runs: the arm (ARM@<objective or uplink level> for a configuration chosen by another one)
    pa.field("label", pa.string()),
    pa.field("dataset", pa.string()),  # data.name
    # the model built (model.name resolved: cnn, cnn_valid, resnet18)
    pa.field("model", pa.string()),
    # the engine that ran it: local or ray (numbers identical, tested)
    pa.field("backend", pa.string()),
    pa.field("rounds_planned", pa.int64()),  # T: fl.rounds
    pa.field("rounds_completed", pa.int64()),  # rounds whose rows are recorded
    pa.field("final_round", pa.int64()),  # the last recorded round (null before the first)
    pa.field("num_params", pa.int64()),  # d: the model's trainable parameters
    pa.field("dense_bytes", pa.int64()),  # B0
    # the last validation accuracy (at T for a finished run)
    pa.field("final_val_acc", pa.float64()),
    pa.field("final_val_loss", pa.float64()),  # the last validation loss
    # test accuracy at T (final stage and single runs only; null in a search)
    pa.field("test_acc", pa.float64()),
    pa.field("test_loss", pa.float64()),  # test loss at T
    pa.field("test_round", pa.int64()),  # the round the test split was read at (T), or null
    pa.field("test_reads", pa.int64()),  # times the test split was loaded (0 or 1)
    # bytes: the restricted ledger's uplink over all rounds
    pa.field("cum_up_restricted", pa.int64()),
    # bytes: one dense download per selected client over all rounds
    pa.field("cum_down_sensitivity", pa.int64()),
    # bytes: a dense upload per selected client over all rounds (the saving's reference)
    pa.field("cum_dense_reference", pa.int64()),
    # bytes: every serialized uplink message, headers and control included
    pa.field("cum_up_measured", pa.int64()),
    pa.field("cum_down_measured", pa.int64()),  # bytes: every serialized downlink message
    # 1 − cum_up_restricted / cum_dense_reference, over all rounds
    pa.field("cum_saving_restricted", pa.float64()),
    # the restricted saving with the dense downlink counted
    pa.field("cum_saving_bidirectional", pa.float64()),
    # the server's method state at the end (caches, memories)
    pa.field("server_memory_bytes", pa.int64()),
    # clients' kept state at the end (error-feedback memories)
    pa.field("client_memory_bytes", pa.int64()),
    pa.field("client_steps", pa.int64()),  # local SGD steps over all clients and rounds
    # wall seconds summed over the run's attempts (each up to the checkpoint the next resumed
    # from, the last one whole); null where a resumed checkpoint was written before they were
    # kept
    pa.field("wall_s", pa.float64()),
    pa.field("started_at", pa.string()),  # when the first attempt started (UTC, ISO 8601)
    pa.field("attempts", pa.int64()),  # 1 for a run never resumed
    pa.field("resumed_from_round", pa.int64()),  # the last attempt's checkpoint round, or null
    pa.field("attempt_started_at", pa.string()),  # when the last attempt started (UTC, ISO 8601)
    pa.field("attempt_wall_s", pa.float64()),  # the last attempt's wall seconds
    pa.field("host", pa.string()),  # the machine whose process drove the run (hostname)
    pa.field("ray_node", pa.string()),  # its Ray node id (hex), when it ran inside Ray
    pa.field("config_json", pa.string()),  # the whole run config as JSON
]


def runs_schema() -> pa.Schema:
    """The ``runs`` table: the run columns, then the config columns of every known method."""
    from ..algorithms.registry import method_names

    key = method_names()
    if _RUNS_CACHE.get("key") != key:
        _RUNS_CACHE.update(key=key, schema=pa.schema([*RUN_COLUMNS, *config_fields()]))
    return _RUNS_CACHE["schema"]


_RUNS_CACHE: dict[str, typing.Any] = {}

ROUNDS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),  # the run
        pa.field("seed", pa.int64(), nullable=False),  # the run's seed
        pa.field("round", pa.int64(), nullable=False),  # t, 1..T
        pa.field("num_selected", pa.int64()),  # clients selected this round (S_t)
        pa.field("num_fresh", pa.int64()),  # clients that trained and uploaded this round
        pa.field("num_reused", pa.int64()),  # clients whose cached or stale update was used instead
        # mean local training loss of the clients that trained
        pa.field("train_loss", pa.float64()),
        # validation accuracy of this round's model; null on rounds without evaluation
        pa.field("val_acc", pa.float64()),
        pa.field("val_loss", pa.float64()),  # validation loss, null on rounds without evaluation
        # bytes: this round's uplink in the restricted ledger
        pa.field("up_restricted", pa.int64()),
        pa.field("down_sensitivity", pa.int64()),  # bytes: one dense download per selected client
        pa.field("dense_reference", pa.int64()),  # bytes: a dense upload per selected client
        pa.field("up_measured", pa.int64()),  # bytes: this round's serialized uplink
        pa.field("down_measured", pa.int64()),  # bytes: this round's serialized downlink
        pa.field("cum_up_restricted", pa.int64()),  # bytes: restricted uplink up to this round
        pa.field("cum_down_sensitivity", pa.int64()),  # bytes: dense downloads up to this round
        pa.field("cum_dense_reference", pa.int64()),  # bytes: the dense reference up to this round
        pa.field("cum_up_measured", pa.int64()),  # bytes: measured uplink up to this round
        pa.field("cum_down_measured", pa.int64()),  # bytes: measured downlink up to this round
        # this round's 1 − up_restricted / dense_reference
        pa.field("saving_restricted", pa.float64()),
        # 1 − cum_up_restricted / cum_dense_reference, up to this round
        pa.field("cum_saving_restricted", pa.float64()),
        # the cumulative saving with the dense downlink counted
        pa.field("cum_saving_bidirectional", pa.float64()),
        pa.field("client_steps", pa.int64()),  # local SGD steps this round
        pa.field("update_norm", pa.float64()),  # ‖w_{t+1} − w_t‖
        # client work and server step, plus the wait for this round's validation (on the Ray
        # engine the validation runs beside the next round, so the wait is usually ~0)
        pa.field("round_wall_s", pa.float64()),
    ]
)

CLIENT_EVENTS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),  # the run
        pa.field("seed", pa.int64(), nullable=False),  # the run's seed
        pa.field("round", pa.int64(), nullable=False),  # t
        pa.field("client_id", pa.int64(), nullable=False),  # the client
        pa.field("decision", pa.string(), nullable=False),  # one of DECISIONS
        pa.field("num_samples", pa.int64()),  # the client's training samples
        pa.field("weight", pa.float64()),  # aggregation weight π_i
        # its mean local training loss (null when it did not train)
        pa.field("train_loss", pa.float64()),
        pa.field("local_steps", pa.int64()),  # its local SGD steps
        pa.field("up_restricted", pa.int64()),  # bytes it cost in the restricted ledger
        pa.field("up_measured", pa.int64()),  # bytes it sent, serialized
        pa.field("down_measured", pa.int64()),  # bytes it received, serialized
        pa.field("update_norm", pa.float64()),  # ‖u_i‖ of the contribution
        # DG-FedReuse gate columns, null for methods without a gate
        pa.field("gate_score", pa.float64()),
        pa.field("tau", pa.float64()),  # the gate's threshold τ_t
        pa.field("age", pa.int64()),  # the age of its cached update, in rounds
        pa.field("promoted", pa.bool_()),  # the fresh quota promoted it to train
        pa.field("wall_s", pa.float64()),  # seconds its work took
    ]
)

CLIENTS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),  # the run
        pa.field("seed", pa.int64(), nullable=False),  # the run's seed (the partition's)
        pa.field("client_id", pa.int64(), nullable=False),  # the client
        pa.field("num_samples", pa.int64()),  # its training samples
        pa.field("class_counts", pa.list_(pa.int64())),  # its samples per class
    ]
)

# how a level's reading was taken: crossed — round t is the last whose cumulative uplink stays
# within the level (round t+1 crossed it); cap — the run reached its last round T within it;
# over — round 1 alone spends more, so the reading is the initial model (round 0); a run that
# ended before either (diverged, stopped, failed, interrupted) records its status, no values
LEVEL_STATUS = ("crossed", "cap", "over", "diverged", "stopped", "failed", "interrupted")
LEDGERS = ("restricted", "measured")  # the ledgers a level is read in (design: Ledgers)

LEVELS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),  # the run
        pa.field("seed", pa.int64(), nullable=False),  # the run's seed
        pa.field("ledger", pa.string(), nullable=False),  # restricted | measured
        pa.field("level", pa.float64(), nullable=False),  # f, a fraction of fl.uplink_levels
        # bytes: the level's budget, floor(f · T · K · B0) — dense FedAvg's uplink over the
        # planned rounds T at K clients a round; the same number in both ledgers
        pa.field("level_bytes", pa.int64()),
        # crossed | cap | over (read), or the status of a run that ended before reading it:
        # diverged | stopped | failed | interrupted
        pa.field("status", pa.string(), nullable=False),
        # the round whose global model was read (0: the initial model); null when unread
        pa.field("round", pa.int64()),
        # bytes: this ledger's cumulative uplink up to that round (≤ level_bytes)
        pa.field("cum_up", pa.int64()),
        pa.field("val_acc", pa.float64()),  # validation accuracy of that round's model
        pa.field("val_loss", pa.float64()),  # its validation loss
        # its test accuracy: the test split read once per distinct reading round, in stages
        # that may read it (final stage, single runs); null in a search
        pa.field("test_acc", pa.float64()),
        pa.field("test_loss", pa.float64()),  # its test loss, read with test_acc
    ]
)

TRIALS = pa.schema(
    [
        pa.field("sweep", pa.string(), nullable=False),  # the sweep (a study's <name>-<workload>)
        pa.field("stage", pa.string()),  # search, reeval, protocol
        pa.field("trial_id", pa.string()),  # the Tune trial
        pa.field("run_id", pa.string()),  # its run (runs.run_id)
        pa.field("searcher", pa.string()),  # search.searcher
        pa.field("objective", pa.string()),  # search.objective (a study: its objectives)
        # the run's status (finished, stopped …), or error / missing
        pa.field("status", pa.string()),
        pa.field("val_acc", pa.float64()),  # validation accuracy at the last round it reached
        pa.field("cum_up_restricted", pa.float64()),  # bytes: its restricted uplink
        pa.field("cum_saving_restricted", pa.float64()),  # its restricted uplink saving
        pa.field("objective_value", pa.float64()),  # the value the searcher maximised
        # retention objective: the reference run's validation accuracy
        pa.field("reference_val_acc", pa.float64()),
        # pareto objective: on the front of val_acc against uplink
        pa.field("on_pareto_front", pa.bool_()),
        pa.field("selected", pa.bool_()),  # the final stage reruns this configuration
        pa.field("params_json", pa.string()),  # its searched parameters (dotted fields) as JSON
        pa.field("error", pa.string()),  # the one-line error of a trial a user error ended
        pa.field("arm", pa.string()),  # a study's arm
        pa.field("selected_for", pa.string()),  # a study's objectives that selected the trial
        # the last round the trial's run recorded: below the final round for a trial a
        # scheduler stopped (status "stopped"), so the rung it reached
        pa.field("round_reached", pa.int64()),
        # what the trial cost: round_reached x fl.clients_per_round (a search budget's unit)
        pa.field("client_rounds", pa.int64()),
        # robust selection (search.reeval_*): a candidate's mean validation accuracy over the
        # search seed and the re-evaluation seeds, on its search row
        pa.field("selection_mean", pa.float64()),
        pa.field("seed", pa.int64()),  # a re-evaluation row's search seed (null on search rows)
    ]
)


class _Schemas(Mapping[str, pa.Schema]):
    """table name -> schema; ``runs`` follows the method registry."""

    def __init__(self, fixed: dict[str, pa.Schema | None]):
        self._fixed = fixed

    def __getitem__(self, table: str) -> pa.Schema:
        if table not in self._fixed:
            raise KeyError(table)
        return runs_schema() if table == "runs" else self._fixed[table]

    def __contains__(self, table: object) -> bool:
        return table in self._fixed  # without building the runs schema (no method imports)

    def __iter__(self) -> Iterator[str]:
        return iter(self._fixed)

    def __len__(self) -> int:
        return len(self._fixed)


# tables written once per run, partitioned by method
RUN_TABLES: Mapping[str, pa.Schema] = _Schemas(
    {
        "runs": None,
        "rounds": ROUNDS,
        "client_events": CLIENT_EVENTS,
        "clients": CLIENTS,
        "levels": LEVELS,
    }
)
# run tables a run writes only when it has rows for them (a run without uplink levels has no
# levels file, and a result written before the table existed is still whole without one)
OPTIONAL_RUN_TABLES = frozenset({"levels"})
SCHEMAS: Mapping[str, pa.Schema] = _Schemas(
    {
        "runs": None,
        "rounds": ROUNDS,
        "client_events": CLIENT_EVENTS,
        "clients": CLIENTS,
        "levels": LEVELS,
        "trials": TRIALS,
    }
)

# columns that say when and where a run ran, and therefore differ between otherwise identical runs
TIMING_COLUMNS = {
    "wall_s",
    "round_wall_s",
    "started_at",
    "attempt_started_at",
    "attempt_wall_s",
    "host",
    "ray_node",
}
# how a run got to its end: they differ between an interrupted-and-resumed run and an
# undisturbed one whose every metric they share
ATTEMPT_COLUMNS = {"attempts", "resumed_from_round", "attempt_started_at", "attempt_wall_s"}
