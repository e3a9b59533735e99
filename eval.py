"""Evaluate a checkpoint on the validation split: top-1, top-5, loss and image count.

    python eval.py --checkpoint <ckpt> --data_path <folder> [--config <yaml>] [--use_ema false] [--output m.json]

--data_path is a dataset root holding <val_split>/ (default val), or directly a folder of
class folders. A checkpoint written by train.py or converted from timm carries its data
settings (src/data/data_settings.py): its arch, class count, class names and evaluation
transform are used in place of the config's; a --key given on the command line wins.
With recorded class names, a folder's label is its name's position in the checkpoint's
class list (the folders may be a subset of it).

The seed's --pretrained <ckpt> is accepted in place of --checkpoint. With use_ema (the
default) a training checkpoint is scored with its EMA weights, as evaluation during
training does; a weights-only checkpoint (e.g. converted from timm) with its weights.
With enable_modelarts, data_url is copied to data_path first and the metrics file goes to
train_url at the end (src/tools/modelarts.py).
"""
import json
import os

from src.config import group_keys, parse_cli
from src.errors import UserError, run_cli

USED_KEYS = ("arch", "num_classes", "pretrained",  # the config keys --help lists
             *(key for key in group_keys("data") if key not in ("train_split", "input_size")),
             "batch_size", "use_ema", "strict_data", *group_keys("distributed", "system"))


def add_eval_args(parser):
    parser.add_argument("--checkpoint", metavar="PATH", help="checkpoint to evaluate (.ckpt)")
    parser.add_argument("--output", metavar="PATH",
                        help="JSON file for the metrics (default: eval_<checkpoint name>.json beside the checkpoint)")


def main(argv=None):
    args, cfg = parse_cli(argv, description="Evaluate an NFNet checkpoint.", add_script_args=add_eval_args,
                          shown_keys=USED_KEYS)
    checkpoint = args.checkpoint or cfg.pretrained
    if not checkpoint:
        raise UserError("no checkpoint to evaluate: give --checkpoint PATH")
    if not os.path.isfile(checkpoint):
        raise UserError(f"checkpoint not found: {checkpoint}")
    from src.data.data_settings import applied_note, apply_settings, read_checkpoint_settings

    record = read_checkpoint_settings(checkpoint)
    cfg, changed = apply_settings(cfg, record, explicit=args.cli_keys)
    class_names = (record or {}).get("classes")
    check_layout = _layout_check(class_names)
    from src.tools.context import fit_to_machine, init_context
    from src.tools.modelarts import check_before_init, data_and_results

    cfg = fit_to_machine(cfg)  # a device this machine lacks stops here, in one line
    check_before_init(cfg, check_layout)  # before the heavy imports

    ctx = init_context(cfg.device_target, cfg.device_id, cfg.mode, cfg.seed, cfg.deterministic, cfg.distribute,
                       cfg.cluster_timeout)
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(checkpoint)),
                                         f"eval_{os.path.splitext(os.path.basename(checkpoint))[0]}.json")
    if ctx.is_main and changed:
        print(applied_note(changed, checkpoint))
    with data_and_results(cfg, ctx, output, check_layout):
        evaluate_checkpoint(cfg, ctx, checkpoint, output, record)
    return 0


def eval_split(cfg):
    """cfg with (data_path, val_split) naming the images: <data_path>/<val_split>, or data_path itself."""
    from src.data.folder import resolve_split

    root, split = resolve_split(cfg.data_path, cfg.val_split)
    return cfg if (root, split) == (cfg.data_path, cfg.val_split) else cfg.replace(data_path=root, val_split=split)


def _layout_check(class_names):
    def check_layout(cfg):
        from src.data.folder import check_dataset_layout

        cfg = eval_split(cfg)
        check_dataset_layout(cfg.data_path, None, cfg.val_split, num_classes=cfg.num_classes, class_names=class_names)

    return check_layout


def evaluate_checkpoint(cfg, ctx, checkpoint, output, record=None):
    """Score `checkpoint` on the val split (sharded by rank); rank 0 prints and writes the metrics to `output`.

    record: the checkpoint's data settings (already applied to cfg): its mean/std and class names.
    """
    from src.builders import build_eval_dataset, build_eval_network
    from src.data.dataset import read_bad_file_log, reported_data_errors
    from src.deploy.progress import ProgressBar
    from src.tools.criterion import create_loss
    from src.trainers import evaluate

    network, use_ema = build_eval_network(cfg, checkpoint)
    if cfg.use_ema and not use_ema and ctx.is_main:
        print(f"{checkpoint} holds no EMA weights: evaluating its weights")
    bad_file_log = os.path.splitext(output)[0] + "_bad_files.txt"  # unreadable images, appended by every rank
    if ctx.is_main and os.path.exists(bad_file_log):
        os.remove(bad_file_log)
    cfg = eval_split(cfg)
    if ctx.is_main:
        from src.data.data_settings import describe_transform

        print(f"evaluation transform: {describe_transform(cfg, record)}")
    dataset = build_eval_dataset(cfg, ctx, bad_file_log, record=record, class_names=(record or {}).get("classes"))
    bar = None
    if ctx.is_main:  # images of this rank; the last batch may be partial, finish() gives the true count
        bar = ProgressBar(dataset.get_dataset_size() * dataset.get_batch_size(), "eval", unit="img")
    with reported_data_errors():
        metrics = evaluate(network, dataset, loss_fn=create_loss(reduction="none"), distributed=ctx.distributed,
                           progress=bar.update if bar else None)
    if bar:
        bar.finish()
    unreadable = len(read_bad_file_log(bad_file_log))
    result = {"arch": cfg.arch, "checkpoint": os.path.abspath(checkpoint), "weights": "ema" if use_ema else "raw",
              "data": os.path.abspath(os.path.join(cfg.data_path, cfg.val_split)),
              "transform": {key: getattr(cfg, key) for key in ("test_input_size", "crop_pct", "eval_crop_mode",
                                                               "interpolation")},
              **{k: _plain(v) for k, v in metrics.items()}, "unreadable": unreadable}
    if ctx.is_main:
        loss = f", loss {result['loss']:.4f}" if result.get("loss") is not None else ""
        print(f"top1 {result['top1']:.4f}, top5 {result['top5']:.4f}{loss} "
              f"on {result['count']} images ({result['weights']} weights of {checkpoint})")
        if unreadable:
            print(f"skipped {unreadable} unreadable image(s), listed in {bad_file_log}")
        with open(output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {output}")


def _plain(value):
    return value.item() if hasattr(value, "item") else value


if __name__ == "__main__":
    run_cli(main)
