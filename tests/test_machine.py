"""The kind of machine a process computes on, and the note for a pool of several kinds."""

from __future__ import annotations

from reuse_ray.machine import describe, machine_kind, mixed_kinds_note

AMD = {"cpu": "AuthenticAMD AMD EPYC", "torch": "2.14.1", "capability": "AVX512"}
INTEL = {
    "cpu": "GenuineIntel Intel(R) Xeon(R) Processor",
    "torch": "2.14.1",
    "capability": "AVX512",
}


def test_this_machines_kind_names_processor_torch_and_capability():
    import torch

    kind = machine_kind("cpu")
    assert set(kind) == {"cpu", "torch", "capability"} and kind["cpu"]
    assert kind["torch"] == torch.__version__
    assert kind["capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine_kind("cpu") == kind  # the same every time


def test_one_kind_needs_no_note_and_two_kinds_are_counted():
    assert mixed_kinds_note([]) is None
    assert mixed_kinds_note([AMD, dict(AMD)]) is None
    note = mixed_kinds_note([AMD, INTEL, INTEL])
    assert note.startswith("the client workers run on 2 kinds of machine (")
    assert f"1 on {describe(AMD)}" in note and f"2 on {describe(INTEL)}" in note
    assert "rerun" in note and "\n" not in note
    gpu = mixed_kinds_note([{**AMD, "gpu": "NVIDIA H200"}, {**AMD, "gpu": "NVIDIA A100"}])
    assert gpu is not None and "NVIDIA H200" in gpu and "NVIDIA A100" in gpu
