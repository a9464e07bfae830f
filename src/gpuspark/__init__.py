"""gpuspark: Spark + PyTorch DDP on shared GPU clusters.

Spark prepares data into TFRecord shards and places training processes (barrier stages);
torch.distributed moves gradients; Prometheus watches; quotas share the GPUs between teams.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
