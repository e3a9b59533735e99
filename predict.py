"""Top-k labels and probabilities for images: one file, a list, or a folder searched recursively.

    python predict.py --checkpoint <ckpt> INPUT [INPUT ...] [--topk 5] [--output preds.json|preds.csv]
    python predict.py --model <exported .mindir or .onnx> INPUT [...] [--batch_size 16]

INPUT is an image file, a folder (every image under it, unlabelled) or a .txt/.lst file
listing image paths one per line. Images go through the evaluation transform the
checkpoint carries (src/data/data_settings.py; for an exported model, the <model>.json
export.py writes beside it), in batches, loaded by num_parallel_workers workers. Labels are
the checkpoint's class names (--class_names FILE gives them, one per line, when it has
none), else class indices. Without --output each image's line goes to stdout (control
characters of a name escaped: one line per image); progress and notes go to stderr.
Unreadable images are skipped and listed (an error with --strict_data).

Before any image is read: --output must be a new file (--overwrite replaces one, never an
input) in an existing, writable folder; --class_names must name as many classes as the model
has, and an exported model's <model>.json its class count. A model without that .json runs
with the config's evaluation transform, said in a warning line (its input size comes from
the graph; --crop_pct, --eval_crop_mode and --interpolation set the rest).
"""
import os
import sys
import tempfile

from src.atomic import write_atomic
from src.config import ConfigError, parse_cli
from src.errors import run_cli

DEFAULT_BATCH = 16
USED_KEYS = ("arch", "num_classes", "test_input_size", "eval_crop_mode", "crop_pct",  # listed by --help
             "interpolation", "eval_batch_size", "num_parallel_workers", "use_ema", "strict_data", "device_target",
             "device_id", "mode", "seed")
MODEL_EXTENSIONS = (".mindir", ".onnx")


def add_predict_args(parser):
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image file, folder (recursive) or .txt list")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", metavar="PATH", help="MindSpore checkpoint (.ckpt) to predict with")
    source.add_argument("--model", metavar="PATH", help="exported model: .mindir (MindSpore) or .onnx (onnxruntime)")
    parser.add_argument("--topk", type=int, default=5, metavar="K", help="classes per image (default 5)")
    parser.add_argument("--output", metavar="PATH", help="write the predictions to a .json or .csv file")
    parser.add_argument("--format", choices=("json", "csv"), help="output format (default: from --output's extension)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument("--class_names", metavar="FILE", help="class names in label order, one per line")


def main(argv=None):
    from src.deploy.cli import alias_flag

    # --batch_size is predict's batch, the config key eval_batch_size (batch_size is the training batch)
    argv = alias_flag(sys.argv[1:] if argv is None else argv, "--batch_size", "--eval_batch_size")
    args, cfg = parse_cli(argv, description="Top-k predictions for images with a checkpoint or an exported model.",
                          add_script_args=add_predict_args, shown_keys=USED_KEYS)
    model_path = args.checkpoint or args.model
    check_args(args, model_path)
    from src.deploy.predict import collect_images, output_format, read_class_names

    fmt = output_format(args.output, args.format) if args.output else None
    class_names = read_class_names(args.class_names) if args.class_names else None
    paths = collect_images(args.inputs)
    from src.run.context import fall_back_device, fit_to_machine

    if args.model and args.model.lower().endswith(".onnx"):
        cfg = cfg.replace(device_target="CPU")  # ONNX Runtime runs it; MindSpore only loads the images
    cfg = fall_back_device(cfg, args.cli_keys, notice=note)  # no --device_target: what this MindSpore runs
    cfg = fit_to_machine(cfg, notice=note, explicit=args.cli_keys)  # a named device missing stops here

    from src.data.data_settings import (applied_note, apply_settings, describe_transform, read_checkpoint_settings,
                                        read_sidecar, sidecar_path)

    record = read_checkpoint_settings(model_path) if args.checkpoint else read_sidecar(model_path)
    cfg, changed = apply_settings(cfg, record, explicit=args.cli_keys)
    if changed:
        note(applied_note(changed, model_path))
    class_names = class_names or (record or {}).get("classes")

    runner, cfg = create_runner(cfg, args, model_path)
    from src.deploy.predict import check_class_count

    check_class_count(runner, class_names, args.class_names, None if args.checkpoint else record, model_path)
    if args.model and record is None:
        note(f"warning: {model_path} has no {sidecar_path(model_path)} (the data settings export.py writes beside "
             f"it): using the config's evaluation transform, {describe_transform(cfg)}; give --crop_pct, "
             f"--eval_crop_mode or --interpolation if the model was trained with others")
    from src.builders import build_eval_transform
    from src.data.dataset import create_file_dataset, read_bad_file_log, reported_data_errors
    from src.data.folder import escape_name
    from src.deploy.predict import bad_files_path, format_line, format_predictions, predict, write_predictions
    from src.run.progress import ProgressBar

    transform = build_eval_transform(cfg, record)
    note(f"{len(paths)} images, batch {runner.batch_size}; evaluation transform: {describe_transform(cfg, record)}")
    with tempfile.TemporaryDirectory(prefix="predict-") as scratch:
        bad_file_log = os.path.join(scratch, "bad_files.txt")
        dataset = create_file_dataset(paths, runner.batch_size, transform, cfg.num_parallel_workers,
                                      strict_data=cfg.strict_data, bad_file_log=bad_file_log)
        with reported_data_errors():
            predictions = predict(runner, dataset, paths, args.topk, class_names,
                                  progress=ProgressBar(len(paths), "predict"))
        unreadable = read_bad_file_log(bad_file_log)
    if args.output:
        meta = {"model": os.path.abspath(model_path), "transform": describe_transform(cfg, record),
                "data_settings": (record or {}).get("source", "config"), "topk": args.topk,
                "count": len(predictions), "unreadable": unreadable}
        write_predictions(args.output, format_predictions(predictions, fmt, args.topk, meta))
        note(f"wrote {len(predictions)} predictions to {args.output}")
    else:
        for item in predictions:
            print(format_line(item))
    listed_path = bad_files_path(args.output) if args.output else None
    if listed_path and os.path.lexists(listed_path) and not unreadable:  # an earlier run's (--overwrite)
        os.remove(listed_path)
    if unreadable:
        listed = ""
        if listed_path:
            write_atomic(listed_path, "".join(escape_name(path) + "\n" for path in unreadable))
            listed = f", listed in {listed_path}"
        note(f"skipped {len(unreadable)} unreadable image(s){listed}: {', '.join(map(escape_name, unreadable[:3]))}"
             + (" ..." if len(unreadable) > 3 else ""))
    return 0


def note(line):
    print(line, file=sys.stderr, flush=True)


def check_args(args, model_path):
    """The cheap checks, before MindSpore starts: the model, and the outputs against every input."""
    if args.topk < 1:
        raise ConfigError(f"command line: --topk must be >= 1, got {args.topk}")
    if not os.path.isfile(model_path):
        raise ConfigError(f"{'checkpoint' if args.checkpoint else 'model'} not found: {model_path}")
    if args.model and not model_path.lower().endswith(MODEL_EXTENSIONS):
        raise ConfigError(f"--model {model_path}: expected an exported {' or '.join(MODEL_EXTENSIONS)} file "
                          f"(a .ckpt goes with --checkpoint)")
    if args.output:
        from src.data.data_settings import sidecar_path
        from src.deploy.cli import check_output
        from src.deploy.predict import bad_files_path

        inputs = [model_path, sidecar_path(model_path), args.class_names, *args.inputs]
        check_output("--output", args.output, inputs, overwrite=args.overwrite)
        check_output("the unreadable-image list of --output", bad_files_path(args.output), inputs,
                     overwrite=args.overwrite)


def create_runner(cfg, args, model_path):
    """(runner, cfg with the test size the model takes)."""
    from src.deploy import predict as runners

    batch = cfg.eval_batch_size or DEFAULT_BATCH
    if args.checkpoint:
        from src.run.context import init_context

        init_context(cfg.device_target, cfg.device_id, cfg.mode, cfg.seed)
        return runners.CheckpointRunner(cfg, model_path, batch), cfg
    runner = runners.ModelRunner(model_path, batch, cfg.device_target)
    size = runner.image_size
    if size is not None and size != cfg.test_input_size:
        if "test_input_size" in args.cli_keys:
            raise ConfigError(f"command line: --test_input_size {cfg.test_input_size}, but {model_path} takes "
                              f"{size}x{size} images")
        note(f"{model_path} takes {size}x{size} images: test_input_size {size}")
        cfg = cfg.replace(test_input_size=size)
    return runner, cfg


if __name__ == "__main__":
    run_cli(main)
