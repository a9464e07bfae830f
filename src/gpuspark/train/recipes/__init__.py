"""Ready training recipes on gpuspark shards (own networks; the ResNets of MONAI's layout).

- ``resnet3d``: ResNet 10/18/34/50 (MONAI's layout) with ``spatial_dims=3`` and one input
  channel on CT volume shards from ``gpuspark prep dicom``; random flips and small intensity
  shifts; validation accuracy and ROC AUC after each epoch; the best model exported to ``best.pt``.
- ``resnet2d``: ResNet-50 (MONAI's layout) with ``spatial_dims=2`` on image-folder shards from
  ``gpuspark prep images``; validation top-1.
- ``bert``: a BERT-style masked-language-model encoder (sizes ``tiny`` to ``large``) on the
  token datasets of ``gpuspark prep text``; dynamic masking in the loader; masked-LM loss
  and accuracy; ``strategy="fsdp"`` shards each encoder layer.
- ``tabular``: an MLP with categorical embeddings on the tabular datasets of
  ``gpuspark prep parquet`` (read as blocks of rows by ``TableDataset``); normalisation from
  the manifest's statistics, class-weighted loss; validation ROC AUC, PR AUC and accuracy.

A recipe is a :class:`Recipe` value registered by name (:func:`register_recipe`,
:func:`get_recipe`); the shared code never branches on the name. :func:`train` is the
per-rank function (call it inside :func:`gpuspark.launch.run`); :func:`run` checks the
dataset against the recipe, launches :func:`train` on N processes (Spark by default) and
returns rank 0's summary.

==================  ===========================================================================
``config``          :class:`RecipeConfig` and its groups (data, optim, parallel, model, ...)
``registry``        :class:`Recipe`, register / get, the dataset check
``common``          augmentation and scores the recipes share
``driver``          :func:`run` and :func:`preflight`: the driver side
``rank``            :func:`train`: what each rank runs
``run_dirs``        the checkpoint and output folders of a run
``resnet3d``        the ``resnet3d`` recipe
``resnet2d``        the ``resnet2d`` recipe
``resnet_model``    their network: :func:`resnet`, MONAI's layout and keys (imports torch)
``tabular``         the ``tabular`` recipe
``tabular_model``   its network, :class:`TabularNet` (imports torch: import it where needed)
``bert``            the ``bert`` recipe: masking, dataset, loss, scores
``bert_model``      its network, :class:`BertMLM` and the size table (imports torch)
==================  ===========================================================================

Import from ``gpuspark.train.recipes``; the module layout behind it may change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuspark.errors import RecipeError
    from gpuspark.train.recipes.bert import (
        BERT,
        IGNORE_INDEX,
        BertOptions,
        TextSpec,
        bert_dataset,
        build_bert,
        mask_tokens,
        mlm_loss,
        mlm_scores,
        text_spec,
    )
    from gpuspark.train.recipes.common import accuracy, augment, pr_auc, roc_auc
    from gpuspark.train.recipes.config import (
        BERT_SIZE_NAMES,
        RESNET_DEPTHS,
        CheckpointConfig,
        DataConfig,
        ModelConfig,
        OptimConfig,
        ParallelConfig,
        RecipeConfig,
    )
    from gpuspark.train.recipes.driver import check_recipe, preflight, run
    from gpuspark.train.recipes.rank import build_model, train
    from gpuspark.train.recipes.registry import (
        Decoder,
        Recipe,
        check_dataset,
        get_recipe,
        model_config,
        recipe_names,
        register_recipe,
        unregister_recipe,
    )
    from gpuspark.train.recipes.resnet2d import RESNET2D, decode_image
    from gpuspark.train.recipes.resnet3d import (
        RESNET3D,
        ResNet3dOptions,
        VolumeDecode,
        decode_volume,
    )
    from gpuspark.train.recipes.summary import TrainSummary
    from gpuspark.train.recipes.tabular import (
        TABULAR,
        ClassWeightedLoss,
        TabularOptions,
        TabularSpec,
        build_tabular,
        class_weights,
        tabular_batch,
        tabular_dataset,
        tabular_metrics,
        tabular_spec,
    )

_LAZY = {
    "BERT": "gpuspark.train.recipes.bert",
    "BERT_SIZE_NAMES": "gpuspark.train.recipes.config",
    "BertOptions": "gpuspark.train.recipes.options",
    "CheckpointConfig": "gpuspark.train.recipes.config",
    "ClassWeightedLoss": "gpuspark.train.recipes.tabular",
    "DataConfig": "gpuspark.train.recipes.config",
    "Decoder": "gpuspark.train.recipes.registry",
    "IGNORE_INDEX": "gpuspark.train.recipes.bert",
    "ModelConfig": "gpuspark.train.recipes.config",
    "OptimConfig": "gpuspark.train.recipes.config",
    "ParallelConfig": "gpuspark.train.recipes.config",
    "RESNET2D": "gpuspark.train.recipes.resnet2d",
    "RESNET3D": "gpuspark.train.recipes.resnet3d",
    "RESNET_DEPTHS": "gpuspark.train.recipes.config",
    "Recipe": "gpuspark.train.recipes.registry",
    "RecipeConfig": "gpuspark.train.recipes.config",
    "RecipeError": "gpuspark.errors",
    "ResNet3dOptions": "gpuspark.train.recipes.options",
    "TABULAR": "gpuspark.train.recipes.tabular",
    "TabularOptions": "gpuspark.train.recipes.options",
    "TabularSpec": "gpuspark.train.recipes.tabular",
    "TextSpec": "gpuspark.train.recipes.bert",
    "TrainSummary": "gpuspark.train.recipes.summary",
    "VolumeDecode": "gpuspark.train.recipes.resnet3d",
    "accuracy": "gpuspark.train.recipes.common",
    "augment": "gpuspark.train.recipes.common",
    "bert_dataset": "gpuspark.train.recipes.bert",
    "build_bert": "gpuspark.train.recipes.bert",
    "build_model": "gpuspark.train.recipes.rank",
    "build_tabular": "gpuspark.train.recipes.tabular",
    "check_dataset": "gpuspark.train.recipes.registry",
    "check_recipe": "gpuspark.train.recipes.driver",
    "class_weights": "gpuspark.train.recipes.tabular",
    "decode_image": "gpuspark.train.recipes.resnet2d",
    "decode_volume": "gpuspark.train.recipes.resnet3d",
    "get_recipe": "gpuspark.train.recipes.registry",
    "mask_tokens": "gpuspark.train.recipes.bert",
    "mlm_loss": "gpuspark.train.recipes.bert",
    "mlm_scores": "gpuspark.train.recipes.bert",
    "model_config": "gpuspark.train.recipes.registry",
    "pr_auc": "gpuspark.train.recipes.common",
    "preflight": "gpuspark.train.recipes.driver",
    "recipe_names": "gpuspark.train.recipes.registry",
    "register_recipe": "gpuspark.train.recipes.registry",
    "roc_auc": "gpuspark.train.recipes.common",
    "run": "gpuspark.train.recipes.driver",
    "tabular_batch": "gpuspark.train.recipes.tabular",
    "tabular_dataset": "gpuspark.train.recipes.tabular",
    "tabular_metrics": "gpuspark.train.recipes.tabular",
    "tabular_spec": "gpuspark.train.recipes.tabular",
    "text_spec": "gpuspark.train.recipes.bert",
    "train": "gpuspark.train.recipes.rank",
    "unregister_recipe": "gpuspark.train.recipes.registry",
}
"""Public name -> its module, imported on first use: ``import gpuspark.train.recipes`` (and
its ``config`` and ``options``, which ``gpuspark train`` reads for its flags) loads neither
torch nor numpy."""

__all__ = [
    "BERT",
    "BERT_SIZE_NAMES",
    "IGNORE_INDEX",
    "RECIPES",
    "RESNET2D",
    "RESNET3D",
    "RESNET_DEPTHS",
    "TABULAR",
    "BertOptions",
    "CheckpointConfig",
    "ClassWeightedLoss",
    "DataConfig",
    "Decoder",
    "ModelConfig",
    "OptimConfig",
    "ParallelConfig",
    "Recipe",
    "RecipeConfig",
    "RecipeError",
    "ResNet3dOptions",
    "TabularOptions",
    "TabularSpec",
    "TextSpec",
    "TrainSummary",
    "VolumeDecode",
    "accuracy",
    "augment",
    "bert_dataset",
    "build_bert",
    "build_model",
    "build_tabular",
    "check_dataset",
    "check_recipe",
    "class_weights",
    "decode_image",
    "decode_volume",
    "get_recipe",
    "mask_tokens",
    "mlm_loss",
    "mlm_scores",
    "model_config",
    "pr_auc",
    "preflight",
    "recipe_names",
    "register_recipe",
    "roc_auc",
    "run",
    "tabular_batch",
    "tabular_dataset",
    "tabular_metrics",
    "tabular_spec",
    "text_spec",
    "train",
    "unregister_recipe",
]


def __getattr__(name: str) -> Any:
    if name == "RECIPES":  # the built-in recipes' names (recipe_names() lists later ones too)
        return importlib.import_module("gpuspark.train.recipes.registry").recipe_names()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuspark.train.recipes' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
