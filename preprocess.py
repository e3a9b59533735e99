"""Write a validation folder as eval-transformed float32 NCHW .bin files for the inference apps.

    python preprocess.py --config src/configs/dm_nfnet_f0.yaml --data_path <val dir> \
        --output_path preprocess_Result [--batch_size 1] [--overwrite]

Each image goes through src.builders.build_eval_transform(cfg), the transform eval.py
uses (src.data's create_eval_transform with the config's test_input_size, crop_pct,
eval_crop_mode and interpolation), and is written to <output_path>/images/<name>.bin;
<output_path>/labels.json maps each name to its class index. --data_path is the folder of
class folders, or a dataset root holding <val_split>/. --batch_size (export_batch_size)
must match the exported graph's batch. With --checkpoint (or --model, an exported model
with the <model>.json export.py writes), the data settings it carries
(src/data/data_settings.py: test size, eval transform, class names) are used unless given
on the command line, as export.py and eval.py do: the tensors then match the exported model.
--output_path is checked first: a folder (created when missing) outside the images, not an
input, where files can be written; .bin files of an earlier run there need --overwrite.
"""
import os
import sys

from src.config import parse_cli
from src.errors import UserError, run_cli

USED_KEYS = ("data_path", "data_url", "val_split", "test_input_size", "eval_crop_mode", "crop_pct",  # --help
             "interpolation", "export_batch_size", "strict_data")


def add_script_args(parser):
    parser.add_argument("--output_path", metavar="DIR", required=True,
                        help="folder for images/<name>.bin, labels.json and sources.json")
    parser.add_argument("--overwrite", action="store_true", help="replace .bin files of an earlier run")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", metavar="PATH",
                        help="take the test size, eval transform and class names from this checkpoint")
    source.add_argument("--model", metavar="PATH",
                        help="... or from the <model>.json that export.py wrote beside this exported model")


def main(argv=None):
    from src.deploy.cli import alias_flag

    argv = alias_flag(sys.argv[1:] if argv is None else argv, "--batch_size", "--export_batch_size")
    args, cfg = parse_cli(argv, description="Eval-transform a validation folder into .bin tensors.",
                          add_script_args=add_script_args, shown_keys=USED_KEYS)

    record = None
    source = args.checkpoint or args.model
    if source:
        from src.data.data_settings import applied_note, apply_settings, read_checkpoint_settings, read_sidecar

        if not os.path.isfile(source):
            raise UserError(f"{'checkpoint' if args.checkpoint else 'model'} not found: {source}")
        record = read_checkpoint_settings(source) if args.checkpoint else read_sidecar(source)
        cfg, changed = apply_settings(cfg, record, explicit=args.cli_keys)
        if changed:
            print(applied_note(changed, source))

    from src.builders import build_eval_transform
    from src.deploy.cli import check_output
    from src.deploy.preprocess import preprocess_folder, resolve_split_dir

    split_dir = resolve_split_dir(cfg.data_path, cfg.val_split)
    check_output("--output_path", args.output_path, [split_dir, source], make_parents=True, folder=True)
    transform = build_eval_transform(cfg, record)  # the transform eval.py uses
    summary = preprocess_folder(split_dir, args.output_path, transform, batch_size=cfg.export_batch_size,
                                strict_data=cfg.strict_data, overwrite=args.overwrite,
                                class_names=(record or {}).get("classes"))
    skipped = f", {len(summary['skipped'])} unreadable skipped" if summary["skipped"] else ""
    print(f"preprocessed {summary['count']} images of {split_dir} ({len(summary['classes'])} classes{skipped}) "
          f"into {summary['files']} files of batch {cfg.export_batch_size} at "
          f"{cfg.test_input_size}x{cfg.test_input_size}: {summary['images_dir']}, labels {summary['labels_path']}")


if __name__ == "__main__":
    run_cli(main)
