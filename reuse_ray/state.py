"""The communicated state vector w (methods: Conventions).

``w`` is the concatenation, in ``state_dict`` order, of every floating-point entry of the model's
state: trainable parameters and BatchNorm running statistics. Integer buffers
(``num_batches_tracked``) are not communicated; the server keeps its own copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lazy import nn, torch


@dataclass(frozen=True)
class TensorSpec:
    """One ``state_dict`` float entry inside the flat vector."""

    name: str
    shape: tuple[int, ...]
    numel: int
    offset: int
    trainable: bool


@dataclass(frozen=True)
class StateLayout:
    """Where each float tensor of a model lives in the flat state vector."""

    tensors: tuple[TensorSpec, ...]
    dim: int

    @classmethod
    def from_model(cls, model: nn.Module) -> StateLayout:
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        specs: list[TensorSpec] = []
        offset = 0
        for name, t in model.state_dict().items():
            if not t.is_floating_point():
                continue
            specs.append(TensorSpec(name, tuple(t.shape), t.numel(), offset, name in trainable))
            offset += t.numel()
        return cls(tuple(specs), offset)

    @property
    def dense_bytes(self) -> int:
        """B0 = 4·d, the bytes of one dense fp32 state (methods: Conventions)."""
        return 4 * self.dim

    def index(self, name: str) -> TensorSpec:
        for s in self.tensors:
            if s.name == name:
                return s
        raise KeyError(name)

    def subset(self, names: list[str]) -> StateLayout:
        """A layout of just the named tensors, packed contiguously in the given order."""
        specs, off = [], 0
        for n in names:
            s = self.index(n)
            specs.append(TensorSpec(s.name, s.shape, s.numel, off, s.trainable))
            off += s.numel
        return StateLayout(tuple(specs), off)

    def trainable_subset(self) -> StateLayout:
        """The layout of the trainable tensors alone (where SCAFFOLD's controls live)."""
        return self.subset([s.name for s in self.tensors if s.trainable])

    def trainable_mask(self) -> torch.Tensor:
        """Boolean mask over the flat vector: True on trainable parameters."""
        mask = torch.zeros(self.dim, dtype=torch.bool)
        for s in self.tensors:
            if s.trainable:
                mask[s.offset : s.offset + s.numel] = True
        return mask

    def flatten(self, model: nn.Module) -> torch.Tensor:
        """Flat float32 copy of the model's float state."""
        sd = model.state_dict()
        return torch.cat([sd[s.name].detach().reshape(-1).to(torch.float32) for s in self.tensors])

    def load(self, model: nn.Module, flat: torch.Tensor) -> None:
        """Write the flat vector into the model's float state, in place."""
        sd = model.state_dict()
        with torch.no_grad():
            for s in self.tensors:
                sd[s.name].copy_(flat[s.offset : s.offset + s.numel].view(s.shape))


def int_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """The non-float state entries the server keeps to itself (methods: Conventions)."""
    return {n: t.clone() for n, t in model.state_dict().items() if not t.is_floating_point()}
