"""Ready training recipes on gpuspark shards (MONAI networks).

- ``resnet3d``: MONAI ResNet 10/18/34/50 with ``spatial_dims=3`` and one input channel on CT
  volume shards from ``gpuspark prep dicom``; random flips and small intensity shifts;
  validation accuracy and ROC AUC after each epoch; the best model exported to ``best.pt``.
- ``resnet2d``: MONAI ResNet-50 with ``spatial_dims=2`` on image-folder shards from
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
``tabular``         the ``tabular`` recipe
``tabular_model``   its network, :class:`TabularNet` (imports torch: import it where needed)
``bert``            the ``bert`` recipe: masking, dataset, loss, scores
``bert_model``      its network, :class:`BertMLM` and the size table (imports torch)
==================  ===========================================================================

Import from ``gpuspark.train.recipes``; the module layout behind it may change.
"""

from __future__ import annotations

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
from gpuspark.train.recipes.resnet3d import RESNET3D, ResNet3dOptions, VolumeDecode, decode_volume
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

RECIPES = recipe_names()
"""Names of the built-in recipes (:func:`recipe_names` also lists ones registered later)."""

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
