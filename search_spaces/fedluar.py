"""FedLUAR (ALGORITHMS.md §2.4): δ recycled layers and r of the uploaded layers.

δ must stay below the model's candidate layers (trainable tensors of rank >= 2): 4 for the
shallow CNN, 21 for ResNet-18 — widen the upper bound for larger models.
"""


def space(trial):
    trial.suggest_int("method.fedluar.delta", 0, 3)
    trial.suggest_float("method.topk_ratio", 0.01, 1.0, log=True)
    return None
