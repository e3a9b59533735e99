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
train_url at the end (src/run/modelarts.py).

The metrics file is checked before anything runs: a new file (--overwrite replaces one, never
the checkpoint) in an existing, writable folder. Beside it, <output stem>_bad_files.txt lists
(path, tab, reason) the images not scored: unreadable ones, and the entries the folder scan
skipped (broken links, a second link to the same file, files without read permission).
"""
import json
import os

from src.atomic import write_atomic
from src.config import group_keys, parse_cli
from src.errors import UserError, run_cli

USED_KEYS = ("arch", "num_classes", "pretrained",  # the config keys --help lists
             *(key for key in group_keys("data") if key not in ("train_split", "input_size")),
             "batch_size", "use_ema", "strict_data", *group_keys("distributed", "system"))


def add_eval_args(parser):
    parser.add_argument("--checkpoint", metavar="PATH", help="checkpoint to evaluate (.ckpt)")
    parser.add_argument("--output", metavar="PATH",
                        help="JSON file for the metrics (default: eval_<checkpoint name>.json beside the checkpoint)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")


def main(argv=None):
    args, cfg = parse_cli(argv, description="Evaluate an NFNet checkpoint.", add_script_args=add_eval_args,
                          shown_keys=USED_KEYS)
    checkpoint = args.checkpoint or cfg.pretrained
    if not checkpoint:
        raise UserError("no checkpoint to evaluate: give --checkpoint PATH")
    if not os.path.isfile(checkpoint):
        raise UserError(f"checkpoint not found: {checkpoint}")
    from src.data.data_settings import applied_note, apply_settings, read_checkpoint_settings

    output = args.output or os.path.join(os.path.dirname(os.path.abspath(checkpoint)),
                                         f"eval_{os.path.splitext(os.path.basename(checkpoint))[0]}.json")
    check_outputs(output, checkpoint, args.overwrite)
    record = read_checkpoint_settings(checkpoint)
    cfg, changed = apply_settings(cfg, record, explicit=args.cli_keys)
    class_names = (record or {}).get("classes")
    skipped = []  # entries the folder scan left out, for bad_files.txt
    check_layout = _layout_check(class_names, skipped)
    from src.run.context import fall_back_device, fit_to_machine, init_context
    from src.run.modelarts import check_before_init, data_and_results

    cfg = fall_back_device(cfg, args.cli_keys)  # no --device_target: what this MindSpore runs
    cfg = fit_to_machine(cfg, explicit=args.cli_keys)  # a device named but missing stops here, in one line
    listing = check_before_init(cfg, check_layout)  # before the heavy imports

    ctx = init_context(cfg.device_target, cfg.device_id, cfg.mode, cfg.seed, cfg.deterministic, cfg.distribute,
                       cfg.cluster_timeout)
    if ctx.is_main and changed:
        print(applied_note(changed, checkpoint))
    with data_and_results(cfg, ctx, output, check_layout) as copied:
        evaluate_checkpoint(cfg, ctx, checkpoint, output, record, skipped, listing=copied or listing)
    return 0


def bad_files_path(output):
    return os.path.splitext(output)[0] + "_bad_files.txt"


def check_outputs(output, checkpoint, overwrite):
    """The metrics file and its bad-files list, before any work (src.deploy.cli.check_output)."""
    from src.deploy.cli import check_output

    check_output("--output", output, [checkpoint], overwrite=overwrite)
    check_output("the bad-files list of --output", bad_files_path(output), [checkpoint], overwrite=overwrite)


def eval_split(cfg):
    """cfg with (data_path, val_split) naming the images: <data_path>/<val_split>, or data_path itself."""
    from src.data.folder import resolve_split

    root, split = resolve_split(cfg.data_path, cfg.val_split)
    return cfg if (root, split) == (cfg.data_path, cfg.val_split) else cfg.replace(data_path=root, val_split=split)


def _layout_check(class_names, skipped):
    """check_layout(cfg): the val split checked and listed once (src.data.folder.list_dataset); returns its
    SplitListing, which the pipeline reads instead of walking the folder again."""
    def check_layout(cfg):
        from src.data.folder import list_dataset

        cfg = eval_split(cfg)
        skipped.clear()
        return list_dataset(cfg.data_path, None, cfg.val_split, num_classes=cfg.num_classes, class_names=class_names,
                            skipped=skipped)[cfg.val_split]

    return check_layout


def evaluate_checkpoint(cfg, ctx, checkpoint, output, record=None, skipped=(), listing=None):
    """Score `checkpoint` on the val split (sharded by rank); rank 0 prints and writes the metrics to `output`.

    record: the checkpoint's data settings (already applied to cfg): its mean/std and class names.
    skipped: (path, reason) of the entries the folder scan left out; listed with the unreadable images.
    listing: the split as check_layout listed it (None: listed by the pipeline).
    """
    from src.builders import build_eval_dataset, build_eval_network
    from src.data.dataset import read_bad_file_log, reported_data_errors
    from src.deploy.fold import fold_for_cpu_eval
    from src.run.progress import ProgressBar
    from src.trainers.loss import create_loss
    from src.trainers import evaluate

    network, use_ema = build_eval_network(cfg, checkpoint)
    network = fold_for_cpu_eval(network)  # CPU: weights standardized once, not per batch (the same logits)
    if cfg.use_ema and not use_ema and ctx.is_main:
        print(f"{checkpoint} holds no EMA weights: evaluating its weights")
    bad_file_log = bad_files_path(output)  # unreadable images, appended by every rank
    if ctx.is_main and os.path.exists(bad_file_log):
        os.remove(bad_file_log)
    cfg = eval_split(cfg)
    if ctx.is_main:
        from src.data.data_settings import describe_transform

        print(f"evaluation transform: {describe_transform(cfg, record)}")
    dataset = build_eval_dataset(cfg, ctx, bad_file_log, record=record, class_names=(record or {}).get("classes"),
                                 listing=listing)
    bar = None
    if ctx.is_main:  # images of this rank (padding rows are not counted); finish() leaves out unreadable ones
        bar = ProgressBar(dataset.shard_images, "eval", unit="img")
    with reported_data_errors():
        metrics = evaluate(network, dataset, loss_fn=create_loss(reduction="none"), distributed=ctx.distributed,
                           progress=bar.update if bar else None)
    if bar:
        bar.finish()
    unreadable = len(read_bad_file_log(bad_file_log))
    listed = [(path, reason) for path, reason in skipped if reason != "not an image (extension)"]
    result = {"arch": cfg.arch, "checkpoint": os.path.abspath(checkpoint), "weights": "ema" if use_ema else "raw",
              "data": os.path.abspath(os.path.join(cfg.data_path, cfg.val_split)),
              "transform": {key: getattr(cfg, key) for key in ("test_input_size", "crop_pct", "eval_crop_mode",
                                                               "interpolation")},
              **{k: _plain(v) for k, v in metrics.items()}, "unreadable": unreadable,
              "skipped_entries": len(listed)}
    if ctx.is_main:
        loss = f", loss {result['loss']:.4f}" if result.get("loss") is not None else ""
        print(f"top1 {result['top1']:.4f}, top5 {result['top5']:.4f}{loss} "
              f"on {result['count']} images ({result['weights']} weights of {checkpoint})")
        if listed:
            from src.data.folder import escape_name

            with open(bad_file_log, "a", encoding="utf-8") as f:
                f.write("".join(f"{escape_name(path)}\t{escape_name(reason)}\n" for path, reason in listed))
        if unreadable or listed:
            entries = f" and {len(listed)} entries of the folder (broken links, duplicates, ...)" if listed else ""
            print(f"skipped {unreadable} unreadable image(s){entries}, listed in {bad_file_log}")
        write_atomic(output, json.dumps(result, indent=2) + "\n")
        print(f"wrote {output}")


def _plain(value):
    return value.item() if hasattr(value, "item") else value


if __name__ == "__main__":
    run_cli(main)
