"""The protocol's models (methods: The paper's protocol): the shallow CNN, ResNet-18, the head rule.

The head (methods: DG-FedReuse) is every parameter whose name contains ``classifier`` or ``fc``.
The shallow
CNN names only its final linear layer ``fc``; its hidden linear layer is ``hidden``, so the head
is the last layer alone. torchvision's ResNet-18 head is ``fc.weight`` and ``fc.bias``.
"""

from __future__ import annotations

import torch
from torch import nn

from .errors import UserError
from .rng import Purpose, torch_seed

HEAD_KEYS = ("classifier", "fc")


class ShallowCNN(nn.Module):
    """Two 5x5 conv + max-pool blocks, one hidden linear layer and the ``fc`` head.

    ``padding=2`` keeps each convolution's size (``cnn``); ``padding=0`` is the classic unpadded
    MNIST CNN (``cnn_valid``: 28 → 24 → 12 → 8 → 4, so 64·4·4 = 1024 features for the hidden
    layer), about half the convolution work."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        height: int,
        width: int,
        hidden: int,
        padding: int = 2,
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=5, padding=padding)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5, padding=padding)
        self.pool = nn.MaxPool2d(2)
        shrink = 4 - 2 * padding  # what each 5x5 convolution takes off a side's length
        h = ((height - shrink) // 2 - shrink) // 2
        w = ((width - shrink) // 2 - shrink) // 2
        if h < 1 or w < 1:
            least = 4 if padding == 2 else 12
            raise UserError(
                f"model: input {height}x{width} is too small for the shallow CNN "
                f"— allowed: images of at least {least}x{least} (data.synthetic_shape)"
            )
        self.hidden = nn.Linear(64 * h * w, hidden)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.relu(self.hidden(x.flatten(1)))
        return self.fc(x)

    def forward_stacked(
        self, p: dict[str, torch.Tensor], x: torch.Tensor, grouped: bool | None = None
    ) -> torch.Tensor:
        """:meth:`forward` of A models at once, for vectorized clients: ``p`` holds every
        parameter stacked along a leading dimension (A, ...), ``x`` is (A, B, C, H, W), and the
        result (A, B, classes) has in row a the logits of the parameters ``p[·][a]`` on
        ``x[a]``. Each linear layer is one batched product; on a GPU each convolution is one
        grouped convolution (a group per model) — what ``torch.func.vmap`` would make of
        :meth:`forward`, without its per-operation dispatch — while on a CPU the models'
        convolutions run one after the other, as plain ones (measured on 2 threads for ten of
        W's clients, forward and backward of a step: 0.39 s against 0.61 s grouped).
        ``grouped`` forces one or the other."""
        A, B = x.shape[:2]
        convs = ("conv1", "conv2")
        if not (x.device.type != "cpu" if grouped is None else grouped):
            h = torch.stack(
                [
                    self._features(x[a], [(p[f"{n}.weight"][a], p[f"{n}.bias"][a]) for n in convs])
                    for a in range(A)
                ]
            )
        else:
            h = x.transpose(0, 1).reshape(B, A * x.shape[2], *x.shape[3:])  # (model, c)
            for name in convs:
                conv, w, b = getattr(self, name), p[f"{name}.weight"], p[f"{name}.bias"]
                h = nn.functional.conv2d(
                    h, w.reshape(-1, *w.shape[2:]), b.reshape(-1), padding=conv.padding, groups=A
                )
                h = nn.functional.max_pool2d(torch.relu(h), 2)
            h = h.reshape(B, A, -1).transpose(0, 1)  # (A, B, features), as forward flattens
        h = torch.relu(
            torch.baddbmm(p["hidden.bias"].unsqueeze(1), h, p["hidden.weight"].transpose(1, 2))
        )
        return torch.baddbmm(p["fc.bias"].unsqueeze(1), h, p["fc.weight"].transpose(1, 2))

    def _features(self, x: torch.Tensor, wb: list[tuple[torch.Tensor, torch.Tensor]]):
        """One model's convolution blocks with the given (weight, bias) pairs, flattened."""
        for conv, (w, b) in zip((self.conv1, self.conv2), wb, strict=True):
            x = self.pool(torch.relu(nn.functional.conv2d(x, w, b, padding=conv.padding)))
        return x.flatten(1)


def resnet18(in_channels: int, num_classes: int) -> nn.Module:
    """torchvision ResNet-18 (ImageNet stem, as in the seed), input channels adapted."""
    import torchvision

    model = torchvision.models.resnet18(weights=None, num_classes=num_classes)
    if in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def resolve_model_name(model_name: str, dataset: str) -> str:
    """``auto`` means ResNet-18 for CIFAR and the shallow CNN otherwise (methods: The paper's
    protocol)."""
    if model_name != "auto":
        return model_name
    return "resnet18" if dataset.startswith("cifar") else "cnn"


def build_model(
    name: str, shape: tuple[int, int, int], num_classes: int, hidden: int = 128
) -> nn.Module:
    """Construct a model for input ``shape`` = (C, H, W); weights use torch's default init."""
    c, h, w = shape
    if name == "cnn":
        return ShallowCNN(c, num_classes, h, w, hidden)
    if name == "cnn_valid":
        return ShallowCNN(c, num_classes, h, w, hidden, padding=0)
    if name == "resnet18":
        return resnet18(c, num_classes)
    raise UserError(f"model.name: unknown model {name!r}; allowed: auto, cnn, cnn_valid, resnet18")


def init_model(
    name: str, shape: tuple[int, int, int], num_classes: int, seed: int, hidden: int = 128
) -> nn.Module:
    """Build a model whose initial weights come from the keyed ``model_init`` stream
    (design: Keyed streams and pairing)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed(seed, Purpose.MODEL_INIT))
        return build_model(name, shape, num_classes, hidden)


def set_memory_format(model: nn.Module, channels_last: bool) -> nn.Module:
    """Keep the model's 4-D weights channels-last (``engine.channels_last``); a convolution
    with such weights runs channels-last whatever its input's layout. Loading a flat state
    (:meth:`~reuse_ray.state.StateLayout.load` copies in place) keeps the layout, and
    flattening reads the values in their logical order, so states and deltas are the same
    vectors either way."""
    if channels_last:
        model.to(memory_format=torch.channels_last)
    return model


def head_parameter_names(model: nn.Module) -> list[str]:
    """The head parameters: names containing 'classifier' or 'fc' (methods: DG-FedReuse)."""
    return [n for n, _ in model.named_parameters() if any(k in n for k in HEAD_KEYS)]
