"""Data pipeline: ImageNet-layout folders, per-image transforms, mindspore.dataset pipelines, demo digits.

Names are resolved lazily, so ``import src.data.transforms`` (preprocess.py) or
``src.data.folder`` (layout checks before heavy imports) does not import MindSpore.
"""
import importlib

_EXPORTS = {
    "DatasetError": "folder",
    "IMG_EXTENSIONS": "folder",
    "scan_image_folder": "folder",
    "check_dataset_layout": "folder",
    "IMAGENET_MEAN": "transforms",
    "IMAGENET_STD": "transforms",
    "UnreadableImageError": "transforms",
    "load_image": "transforms",
    "create_train_transform": "transforms",
    "create_eval_transform": "transforms",
    "create_dataset": "dataset",
    "create_loader": "dataset",
    "create_mixup": "dataset",
    "read_bad_file_log": "dataset",
    "pipeline_data_error": "dataset",
    "reported_data_errors": "dataset",
    "materialize_digits": "digits",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
