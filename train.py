"""Train an NFNet.

    python train.py --config src/configs/dm_nfnet_f0.yaml [--device_target CPU|GPU|Ascend] [--key value ...]

Every setting comes from the YAML and can be overridden as --key value (see src/config.py).
The run directory (output_dir) receives config.yaml, train.log, checkpoints (the last
keep_checkpoint_max epochs and <arch>_best.ckpt), metrics.csv and curves.png. In a
distributed run rank 0 alone decides on it and writes these; rank r logs to train_rank<r>.log.
Every input (data, --resume and --pretrained checkpoints) is checked before the run directory is
prepared, so a refused command writes nothing; train.py writes only in a directory it created or
the run directory it resumes, never inside data_path (src/run/run_dir.py).
With enable_modelarts, data_url is copied to data_path first and the run directory goes to
train_url at the end (src/run/modelarts.py).

Every checkpoint carries the run's class names and evaluation transform
(src/data/data_settings.py), so eval.py, export.py, preprocess.py and predict.py need no
config to agree with it. Fine-tuning (--pretrained <ckpt> --finetune): train.log lists
what was loaded and what was re-initialized. --max_steps N ends the run after N train
steps with a checkpoint of the exact position, as a SIGTERM does (exit status 0); --resume
auto continues with the next step.

Exit status: 0 done (also: --resume auto of a finished run, which changes nothing); 1 training
diverged or a rank was lost; 2 a one-line `error:` (a setting, the data, a checkpoint, a write the
filesystem refused); 143 / 130 stopped by SIGTERM / Ctrl-C after writing a mid-epoch checkpoint
that --resume auto continues from (src/run/preemption.py).
"""
import os
import time

from src.config import SCHEMA, group_keys, parse_cli, save_config
from src.errors import UserError, run_cli

USED_KEYS = tuple(key for key in SCHEMA if key not in group_keys("export"))  # listed by --help


def add_train_args(parser):
    parser.add_argument("--max_steps", type=int, metavar="N",
                        help="end the run after N train steps in all, with a checkpoint (smoke tests, short "
                             "fine-tunes); --resume auto continues with the next step")


def main(argv=None):
    args, cfg = parse_cli(argv, description="Train an NFNet (YAML config, --key value overrides).",
                          add_script_args=add_train_args, shown_keys=USED_KEYS)
    if args.max_steps is not None and args.max_steps < 1:
        raise UserError(f"command line: --max_steps must be >= 1, got {args.max_steps}")
    from src.run.context import fit_to_machine, init_context
    from src.run.modelarts import check_before_init, data_and_results
    from src.run.preemption import StopRequest, end_with_parent
    from src.run.run_dir import check_output_dir

    notices = []  # the settings' notices (workers lowered), printed and in train.log once it exists
    cfg = fit_to_machine(cfg, notice=notices.append)  # a device this machine lacks stops here, in one line
    listing = check_before_init(cfg, check_inputs)  # before the heavy imports: a wrong path costs no graph build
    check_output_dir(cfg.output_dir, cfg.overwrite_output, cfg.resume, cfg.data_path)
    if os.environ.get("MS_ROLE"):  # msrun's processes (msrun waits for them; other launchers may not)
        end_with_parent()  # a killed launcher takes its workers with it
    from src.run.checkpointing import describe_kept, write_errors_reported
    from src.run.console_filter import filter_native_stderr

    filter_native_stderr()  # MindSpore's report of the dataset workers a stop of the process group ended

    ctx = init_context(cfg.device_target, cfg.device_id, cfg.mode, cfg.seed, cfg.deterministic, cfg.distribute,
                       cfg.cluster_timeout)
    deadline = 2 * cfg.cluster_timeout + 60 if ctx.distributed else None
    run_dir = {}  # "path": the run directory, once train() has checked every input and prepared it

    def kept():
        return describe_kept(run_dir["path"]) if run_dir else "nothing was written"

    with data_and_results(cfg, ctx, lambda: run_dir.get("path"), check_inputs) as copied, \
            StopRequest(deadline) as stop_request, write_errors_reported(kept):
        return train(cfg, ctx, stop_request, max_steps=args.max_steps, run_dir=run_dir, notices=notices,
                     listing=copied or listing)


def check_inputs(cfg):
    """The dataset layout and the checkpoint files named on the command line (one-line errors); returns the
    dataset's listing (src.data.folder.list_dataset), which the run reuses: each split is walked once."""
    from src.data.folder import list_dataset

    if cfg.eval_while_train and os.path.realpath(os.path.join(cfg.data_path, cfg.train_split)) == \
            os.path.realpath(os.path.join(cfg.data_path, cfg.val_split)):
        raise UserError(f"val_split {cfg.val_split} is the training split (train_split {cfg.train_split}): the "
                        "best checkpoint would be chosen on training images; set val_split to a held-out split "
                        "or eval_while_train false")
    listing = list_dataset(cfg.data_path, cfg.train_split, cfg.val_split if cfg.eval_while_train else None,
                           num_classes=cfg.num_classes)
    for key in ("pretrained", "resume"):
        path = getattr(cfg, key)
        if path not in (None, "auto") and not os.path.isfile(path):
            raise UserError(f"checkpoint not found: {path} (given as {key})")
    return listing


def train(cfg, ctx, stop_request=None, max_steps=None, run_dir=None, notices=(), listing=None):
    """Train; returns the exit status. Every input (the checkpoint to resume, the pretrained weights) is read
    and checked before the run directory is prepared (decided by rank 0, every rank writes its log there;
    its path goes into `run_dir["path"]`), so a refused run writes nothing. `notices`: lines for the log (console
    and train.log) from before it exists. `listing`: check_inputs' listing of the dataset (listed now when None)."""
    from src import builders
    from src.data.data_settings import checkpoint_entry, settings_from_config
    from src.run.checkpointing import CheckpointManager, prepare_output_dir
    from src.trainers.loss import create_loss
    from src.run.framework_warnings import divert_framework_warnings
    from src.run.logger import RunLogger
    from src.run.state import RunState

    listing = listing or check_inputs(cfg)
    early = list(notices)  # log lines of the checks, on the console and in train.log once it exists
    shape = dict(batch_size=cfg.batch_size, device_num=ctx.group_size, accumulation_step=cfg.accumulation_step,
                 epochs=cfg.epochs)
    record = settings_from_config(cfg, listing[cfg.train_split].classes)
    manager = CheckpointManager(cfg.output_dir, cfg.arch, cfg.keep_checkpoint_max, is_main=ctx.is_main,
                                run_meta=shape, extra_meta=checkpoint_entry(record))
    resume = manager.resume(cfg.resume, share=ctx.from_main, log_fn=early.append)  # reads it once (rank 0)
    if resume.status == "finished":
        if ctx.is_main:
            print(f"nothing to do: the run is finished, {resume.path} holds epoch {cfg.epochs} of {cfg.epochs} "
                  "(raise --epochs to train further)", flush=True)
        return 0
    if resume.epoch_step and cfg.dataset_sink_mode and cfg.device_target != "CPU":  # CPU runs without a sink
        raise UserError("cannot resume in the middle of an epoch with dataset_sink_mode true (MindSpore moves a "
                        "sink's start to an epoch's beginning): resume with --dataset_sink_mode false")
    network = builders.build_network(cfg, checkpoint_path=cfg.pretrained, log_fn=early.append, require_finite=True)

    output_dir = prepare_output_dir(cfg.output_dir, overwrite=cfg.overwrite_output, resume=cfg.resume,
                                    is_main=ctx.is_main, share=ctx.from_main, data_path=cfg.data_path,
                                    log_fn=early.append)  # resuming in it, or the -1 directory it writes to
    if run_dir is not None:
        run_dir["path"] = output_dir
    manager.use_directory(output_dir)  # a resumed run's is cfg.output_dir itself
    log = RunLogger(os.path.join(output_dir, "train.log" if ctx.is_main else f"train_rank{ctx.rank}.log"),
                    rank=ctx.rank)
    for line in early:
        log(line)
    divert_framework_warnings(log.to_file)  # MindSpore's own warnings: in the log, not on the console
    start_epoch, skip_steps = resume.epoch, resume.epoch_step
    if ctx.is_main:
        save_config(cfg, os.path.join(output_dir, "config.yaml"))
    log(f"run directory {output_dir}: {cfg.arch} on {cfg.device_target}, {ctx.group_size} device(s)")

    bad_file_log = os.path.join(output_dir, "bad_files.txt")
    # one pass: a run stopped in the middle of an epoch continues with that epoch's next batch
    train_ds, mixup = builders.build_train_dataset(cfg, ctx, start_epoch, bad_file_log, start_step=skip_steps,
                                                   listing=listing[cfg.train_split])
    val_ds = builders.build_eval_dataset(cfg, ctx, bad_file_log, listing=listing[cfg.val_split]) \
        if cfg.eval_while_train else None
    micro_steps = train_ds.get_dataset_size()
    steps_per_epoch = micro_steps // cfg.accumulation_step
    if steps_per_epoch < 1:
        raise UserError(f"{cfg.data_path}: {micro_steps} batches per epoch, fewer than "
                        f"accumulation_step {cfg.accumulation_step}")
    lr_schedule, peak_lr, global_batch = builders.build_lr_schedule(cfg, steps_per_epoch, ctx.group_size)
    log(f"global batch {global_batch}, peak lr {peak_lr:.6g}, {steps_per_epoch} optimizer steps per epoch")
    if max_steps is not None and start_epoch * micro_steps + skip_steps >= max_steps:
        log(f"nothing to do: the run is at step {start_epoch * micro_steps + skip_steps} already, --max_steps "
            f"{max_steps} (raise --max_steps or leave it out to train further)")
        return 0

    loss_fn = create_loss(label_smoothing=cfg.label_smoothing, soft_targets=mixup is not None)
    optimizer = builders.build_optimizer(cfg, network, lr_schedule)
    train_cell, run = builders.build_trainer(cfg, network, loss_fn, optimizer, log_fn=log)

    manager.restore(train_cell, micro_steps, share_parameters=ctx.share_parameters, log_fn=log)  # after resume()

    eval_fn = builders.build_eval_fn(cfg, ctx, train_cell, network, val_ds) if val_ds is not None else None
    state = RunState(epoch_steps_before=skip_steps, epoch_so_far=resume.so_far)  # what the callbacks share
    callbacks = builders.build_callbacks(cfg, ctx, log, output_dir, manager, train_cell, eval_fn, micro_steps,
                                         lr_schedule, resumed=resume.status is not None, state=state,
                                         stop_request=stop_request, max_steps=max_steps)
    from src.data.dataset import reported_data_errors

    start = time.time()
    with reported_data_errors():
        result = run(train_ds, callbacks, state, start_epoch)
    log(f"training finished in {(time.time() - start) / 60:.1f} min; steps skipped for non-finite values: "
        f"{int(train_cell.overflow_count.asnumpy())}")
    if manager.best_top1 is not None:
        log(f"best top1 {manager.best_top1:.4f}: {manager.best_path}")
    if result.message:
        log(result.message)
    return result.status


if __name__ == "__main__":
    run_cli(main)
