"""Export a trained NFNet for inference: MINDIR, ONNX or AIR (Ascend only).

    python export.py --config src/configs/dm_nfnet_f0.yaml --checkpoint best.ckpt [--use_ema] \
        --file_format MINDIR --file_name dm_nfnet_f0 [--batch_size 1] [--device_target CPU] \
        [--conv_impl native|im2col_cpu|fused_cpu] [--dynamic_batch]

The graph is the eval-mode network in float32 at test_input_size x test_input_size, with
weight standardization folded into plain convolutions (see src/deploy). --pretrained is
accepted as the seed's name for --checkpoint, --batch_size as export_batch_size; the
file is written atomically and an existing one is kept unless --overwrite. Every export
is portable, whichever machine writes it (native Conv2D operators, for Ascend 310/910,
GPU, MindSpore Lite, ONNX); --conv_impl im2col_cpu writes a MINDIR for MindSpore's CPU
backend only, and --conv_impl fused_cpu one for MindSpore's CPU backend on this machine (it
calls the fused CPU kernels compiled here; the fastest for nn.GraphCell). --dynamic_batch
gives an ONNX model a free batch axis.
The checkpoint's data settings (arch, classes, test size and eval transform;
src/data/data_settings.py) are used unless given on the command line, and written next to
the model as <model file>.json for predict.py.
"""
import os
import sys

from src.config import group_keys, parse_cli
from src.errors import UserError, run_cli

USED_KEYS = ("arch", "num_classes", "pretrained", "test_input_size", "use_ema",  # listed by --help
             *group_keys("export"), "device_target", "device_id")


def add_script_args(parser):
    parser.add_argument("--checkpoint", metavar="PATH",
                        help="weights to export (.ckpt); the seed's --pretrained is accepted too")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export file")
    parser.add_argument("--conv_impl", choices=("native", "im2col_cpu", "fused_cpu"), default="native",
                        help="MINDIR/AIR convolutions: native = one Conv2D operator each, runs everywhere "
                             "(default); im2col_cpu = im2col + matmul, faster on MindSpore's CPU backend for "
                             "large inputs and for that backend only; fused_cpu = the fused CPU kernels eval.py "
                             "runs (MINDIR, fastest in MindSpore's CPU backend, only where the kernel library "
                             "compiled on this machine exists)")
    parser.add_argument("--dynamic_batch", action="store_true",
                        help="ONNX only: a free batch axis (any batch at run time; --batch_size is the trace batch)")


def main(argv=None):
    from src.deploy.cli import alias_flag, resolve_checkpoint

    argv = alias_flag(sys.argv[1:] if argv is None else argv, "--batch_size", "--export_batch_size")
    args, cfg = parse_cli(argv, description="Export NFNet as MINDIR, ONNX or AIR.",
                          add_script_args=add_script_args, shown_keys=USED_KEYS)
    checkpoint = resolve_checkpoint(args.checkpoint, cfg.pretrained)
    if not os.path.isfile(checkpoint):  # before MindSpore's import (10 s on a busy CPU), as eval.py does
        raise UserError(f"checkpoint not found: {checkpoint}")
    from src.data.data_settings import applied_note, apply_settings, read_checkpoint_settings

    record = read_checkpoint_settings(checkpoint)  # None for a missing file: run_export reports it
    cfg, changed = apply_settings(cfg, record, explicit=args.cli_keys)
    if changed:
        print(applied_note(changed, checkpoint))

    from src.deploy.export import run_export
    from src.run.context import fall_back_device

    if cfg.file_format != "AIR":  # AIR needs Ascend: run_export says so
        cfg = fall_back_device(cfg, args.cli_keys)  # no --device_target: what this MindSpore runs

    run_export(cfg, checkpoint, overwrite=args.overwrite, conv_impl=args.conv_impl,
               dynamic_batch=args.dynamic_batch, record=record)


if __name__ == "__main__":
    run_cli(main)
