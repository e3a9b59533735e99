"""Each component of a run built from a Config: shared by train.py, eval.py and export.py.

The factories themselves (create_model, create_dataset, create_optimizer, ...) take plain
keyword arguments, MindCV style; this module is the one place that maps config keys onto
them, so train.py and eval.py cannot disagree on, say, the evaluation transform.
"""
import os


def build_network(cfg, checkpoint_path=None, checkpoint_prefix="", finetune=None, log_fn=None, fast_forms=True,
                  require_finite=False, checkpoint_weights=None):
    """create_model with the config's architecture, classes and regularization.

    fast_forms: the backend's fast forms for training and evaluation (on CPU, where training
    is float32: src/models/layers/config.py); export builds with False, the plain forms.
    With log_fn, what was loaded from the checkpoint and what was re-initialized (and why)
    is logged (train.py: the pretrained weights of a fine-tune). require_finite: a checkpoint
    tensor holding NaN or inf is refused in one line naming it (train.py's --pretrained).
    checkpoint_weights: the checkpoint as read already (build_eval_network), not read again.
    """
    from src.models import create_model

    report = {}
    finetune = cfg.finetune if finetune is None else finetune
    network = create_model(cfg.arch, num_classes=cfg.num_classes, drop_rate=cfg.drop_rate,
                           drop_path_rate=cfg.drop_path_rate, drop_path_mode=cfg.drop_path_mode,
                           checkpoint_path=checkpoint_path, checkpoint_prefix=checkpoint_prefix,
                           finetune=finetune, load_report=report, fast_forms=fast_forms,
                           ws_form=cfg.ws_form, gelu_form=cfg.gelu_form, checkpoint_weights=checkpoint_weights)
    if checkpoint_path and require_finite:
        check_finite_weights(network, report["loaded"], checkpoint_path)
    if checkpoint_path and log_fn is not None:
        for line in describe_weights_loaded(report, checkpoint_path, checkpoint_prefix, cfg.num_classes):
            log_fn(line)
    return network


def check_finite_weights(network, names, checkpoint_path):
    """One-line CheckpointError naming the parameters among `names` that hold NaN or inf values (weights
    loaded from `checkpoint_path`: training from them would diverge at the first step)."""
    import numpy as np

    from src.checkpoint_file import CheckpointError

    bad = []
    for name, param in network.parameters_and_names():
        if name in names:
            values = param.asnumpy()
            nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
            if nan or inf:
                bad.append(f"{name} ({', '.join(f'{n} {w}' for n, w in ((nan, 'NaN'), (inf, 'inf')) if n)})")
    if bad:
        shown = ", ".join(bad[:4]) + (f", ... ({len(bad)} in all)" if len(bad) > 4 else "")
        raise CheckpointError(f"{checkpoint_path}: {len(bad)} tensor(s) hold non-finite values: {shown}; "
                              "not usable as pretrained weights")


def build_eval_network(cfg, checkpoint_path, fast_forms=True):
    """(eval-mode network with the checkpoint's evaluation weights, True when these are its EMA weights).

    The EMA averages (src/trainers/ema.py) when cfg.use_ema and the checkpoint holds them (one
    written by train.py), otherwise its weights (e.g. converted from timm). eval.py builds with
    the backend's fast forms, export with the plain ones (fast_forms=False).
    """
    from src.models.checkpoint import EMA_PREFIX, has_prefix, read_checkpoint

    stored = read_checkpoint(checkpoint_path)  # the one read: the EMA check and the weights
    ema = bool(cfg.use_ema) and has_prefix(stored, EMA_PREFIX)
    network = build_network(cfg, checkpoint_path=checkpoint_path, checkpoint_prefix=EMA_PREFIX if ema else "",
                            finetune=False, fast_forms=fast_forms, checkpoint_weights=stored)
    network.set_train(False)
    return network, ema


def describe_weights_loaded(report, checkpoint_path, prefix, num_classes):
    """Log lines for a load_model_weights report: what was loaded, ignored, re-initialized and why."""
    total = len(report["loaded"]) + len(report["kept"])
    where = f" (entries under {prefix!r})" if prefix else ""
    lines = [f"pretrained weights: loaded {len(report['loaded'])} of the network's {total} tensors from "
             f"{checkpoint_path}{where}"
             + (f"; ignored {report['ignored']} other entries (optimizer state, EMA copies, metadata)"
                if report["ignored"] else "")]
    if report["kept"]:
        shapes = ", ".join(f"{name} {stored} -> {own}" for name, (stored, own) in sorted(report["kept"].items()))
        stored_classes = next(iter(report["kept"].values()))[0][0]
        lines.append(f"re-initialized {len(report['kept'])} tensors (finetune): the checkpoint's classifier has "
                     f"{stored_classes} classes, this run {num_classes}: {shapes}")
    else:
        lines.append("re-initialized nothing: every tensor of the network came from the checkpoint")
    return lines


def build_eval_transform(cfg, record=None):
    """THE evaluation transform (eval.py, evaluation during training, preprocess.py, predict.py).

    `record`: data settings carried by a checkpoint (src.data.data_settings), for its mean/std;
    its other settings are applied to `cfg` beforehand (apply_settings).
    """
    from src.data.data_settings import normalization
    from src.data.transforms import create_eval_transform

    mean, std = normalization(record)
    return create_eval_transform(cfg.test_input_size, crop_pct=cfg.crop_pct, crop_mode=cfg.eval_crop_mode,
                                 interpolation=cfg.interpolation, mean=mean, std=std)


def _shards(ctx):
    return dict(num_shards=ctx.group_size, shard_id=ctx.rank) if ctx.distributed else {}


def build_eval_dataset(cfg, ctx, bad_file_log=None, record=None, class_names=None, listing=None):
    """The evaluation pipeline: every image of the val split exactly once, sharded by rank.

    record, class_names: a checkpoint's data settings (mean/std) and class list (labels are
    positions in it, see src.data.folder.scan_image_folder). listing: the val split as listed by
    src.data.folder.list_dataset (not listed again).
    """
    from src.data import create_dataset

    return create_dataset(cfg.data_path, cfg.val_split, False, cfg.eval_batch_size or cfg.batch_size,
                          build_eval_transform(cfg, record), num_parallel_workers=cfg.num_parallel_workers,
                          strict_data=cfg.strict_data, bad_file_log=bad_file_log, class_names=class_names,
                          listing=listing, **_shards(ctx))


def build_train_transforms(cfg):
    """(per-image training transform, batch mixup or None) of the config's recipe.

    mix_scheme timm: crop, flip, RandAugment and normalization per image, then Mixup/CutMix of the batch.
    mix_scheme deepmind (with Mixup or CutMix on): crop and flip per image, then per example a mix of two
    images, RandAugment and normalization in the batch step (nfnets/dataset.py, augment_before_mix False);
    with train_resize tf_bicubic the images are mixed as TensorFlow's unclamped bicubic floats.
    """
    from src.data import create_mixup, create_train_transform
    from src.data.transforms import create_rand_augment

    mixes = cfg.mix_up > 0 or cfg.cutmix > 0
    after_mix = cfg.mix_scheme == "deepmind" and mixes
    augment = None
    if after_mix and cfg.auto_augment:
        augment = create_rand_augment(cfg.auto_augment, cfg.input_size, interpolation=cfg.interpolation)
    transform = create_train_transform(cfg.input_size, interpolation=cfg.interpolation, scale=tuple(cfg.scale),
                                       ratio=tuple(cfg.ratio), hflip=cfg.hflip,
                                       auto_augment=None if after_mix else cfg.auto_augment,
                                       re_prob=cfg.re_prob, re_mode=cfg.re_mode, re_count=cfg.re_count,
                                       normalize=not after_mix, crop=cfg.train_crop, resize=cfg.train_resize)
    mixup = create_mixup(mix_up=cfg.mix_up, cutmix=cfg.cutmix, mixup_prob=cfg.mixup_prob,
                         switch_prob=cfg.switch_prob, mixup_mode=cfg.mixup_mode,
                         label_smoothing=cfg.label_smoothing, num_classes=cfg.num_classes,
                         mix_scheme=cfg.mix_scheme, augment=augment)
    return transform, mixup


def build_train_dataset(cfg, ctx, start_epoch=0, bad_file_log=None, start_step=0, listing=None):
    """(training pipeline, mixup or None) of build_train_transforms, sharded by rank; it begins at batch
    start_step of epoch start_epoch (a run stopped in the middle of an epoch continues there, in the same
    pass as the next epochs); listing: the train split as listed by src.data.folder.list_dataset (not listed
    again)."""
    from src.data import create_dataset

    transform, mixup = build_train_transforms(cfg)
    dataset = create_dataset(cfg.data_path, cfg.train_split, True, cfg.batch_size, transform,
                             num_parallel_workers=cfg.num_parallel_workers, seed=cfg.seed, mixup=mixup,
                             strict_data=cfg.strict_data, start_epoch=start_epoch, bad_file_log=bad_file_log,
                             start_step=start_step, listing=listing, **_shards(ctx))
    return dataset, mixup


def build_lr_schedule(cfg, steps_per_epoch, group_size):
    """(per-optimizer-step lr array, peak lr, global batch); peak = base_lr * global batch / 256."""
    from src.optim.schedulers import create_scheduler, scale_lr

    global_batch = cfg.batch_size * group_size * cfg.accumulation_step
    peak_lr = scale_lr(cfg.base_lr, global_batch, cfg.lr_reference_batch)
    schedule = create_scheduler(steps_per_epoch, cfg.lr_scheduler, lr=peak_lr, min_lr=cfg.min_lr,
                                warmup_epochs=cfg.warmup_length, warmup_lr=cfg.warmup_lr, epochs=cfg.epochs,
                                milestones=cfg.lr_milestones, gamma=cfg.lr_gamma)
    return schedule, peak_lr, global_batch


def build_optimizer(cfg, network, lr_schedule):
    from src.optim.optimizer import create_optimizer

    return create_optimizer(network, cfg.optimizer, lr=lr_schedule, weight_decay=cfg.weight_decay,
                            momentum=cfg.momentum, nesterov=cfg.use_nesterov, clipping=cfg.clipping, eps=cfg.eps,
                            no_decay_keys=tuple(cfg.no_decay), agc_exclude=tuple(cfg.agc_exclude),
                            betas=tuple(cfg.adamw_betas))


def build_trainer(cfg, network, loss_fn, optimizer, log_fn=print):
    """(train cell holding all training state, run(dataset, callbacks, state, initial_epoch)).

    run() trains epochs initial_epoch + 1 ... cfg.epochs over `dataset` (one pass: a dataset resumed in the
    middle of epoch initial_epoch + 1 begins there, build_train_dataset's start_step) with the callbacks of
    build_callbacks, which share `state` (src.run.state.RunState), and returns its RunResult (the exit status).
    In a distributed run, run() ends the process with one error line when a rank is lost (see
    src.run.context.lost_rank_ends_process). log_fn: where the CPU's AMP fallback is said (the run's log).
    """
    from src.trainers import EMA, FunctionalTrainer, create_train_step
    from src.trainers.amp import cpu_amp_notice

    ema = EMA(network.get_parameters(), decay=cfg.ema_decay, warmup=cfg.ema_warmup) if cfg.ema else None
    amp_level = cfg.amp_level
    if cfg.device_target == "CPU" and amp_level != "O0":
        log_fn(cpu_amp_notice(amp_level))
        amp_level = "O0"
    options = dict(amp_level=amp_level, amp_dtype=cfg.amp_dtype, loss_scale=cfg.loss_scale, dynamic_loss_scale=cfg.is_dynamic_loss_scale,
                   loss_scale_factor=cfg.loss_scale_factor, loss_scale_window=cfg.loss_scale_window,
                   accumulation_step=cfg.accumulation_step, ema=ema, device_target=cfg.device_target)
    if cfg.trainer == "functional":
        trainer = FunctionalTrainer(network, loss_fn, optimizer, **options)

        def train_pass(dataset, callbacks, epochs, initial_epoch):
            trainer.train(dataset, epochs, callbacks, initial_epoch=initial_epoch)

        return trainer.train_cell, _resumable_run(cfg, train_pass)
    from mindspore.train import Model

    train_step = create_train_step(network, loss_fn, optimizer, **options)
    model = Model(train_step)

    def train_pass(dataset, callbacks, epochs, initial_epoch):
        model.train(epochs, dataset, callbacks=callbacks, dataset_sink_mode=cfg.dataset_sink_mode,
                    initial_epoch=initial_epoch)

    return train_step, _resumable_run(cfg, train_pass)


def _resumable_run(cfg, train_pass):
    from src.run.context import lost_rank_ends_process

    def run(dataset, callbacks, state, initial_epoch):
        with lost_rank_ends_process(cfg.cluster_timeout):
            train_pass(dataset, callbacks, cfg.epochs, initial_epoch)
        return state.result()

    return run


def build_eval_fn(cfg, ctx, train_cell, network, val_dataset):
    """Evaluation during training: the EMA weights when kept and use_ema, else the raw weights."""
    from src.trainers.loss import create_loss
    from src.trainers import ema_weights_applied, evaluate

    loss_fn = create_loss(reduction="none")

    def eval_fn():
        if cfg.ema and cfg.use_ema:
            with ema_weights_applied(train_cell, network):
                return evaluate(network, val_dataset, loss_fn=loss_fn, distributed=ctx.distributed)
        return evaluate(network, val_dataset, loss_fn=loss_fn, distributed=ctx.distributed)

    return eval_fn


def build_callbacks(cfg, ctx, log, output_dir, manager, train_cell, eval_fn, micro_steps, lr_schedule, resumed,
                    state, stop_request=None, max_steps=None):
    """The run's callbacks in the order src/run/callbacks.py documents, all sharing `state` (a RunState):
    progress, non-finite guard, stop on a signal (stop_request: a StopRequest), stop at
    max_steps (train.py --max_steps), evaluation + best checkpoint, unreadable-file report, periodic
    checkpoints, metrics CSV + curves."""
    from src.run.callbacks import (BadFileReport, CheckpointCallback, EvalCallback, NonFiniteLossGuard,
                                     ProgressLogger, StepLimit, StopOnSignal)
    from src.run.metrics_log import MetricsCSV

    callbacks = [
        ProgressLogger(cfg.log_interval, micro_steps, cfg.batch_size * ctx.group_size, lr_schedule, cfg.epochs,
                       log_fn=log, is_main=ctx.is_main, accumulation_step=cfg.accumulation_step, max_steps=max_steps,
                       state=state),
        NonFiniteLossGuard(cfg.max_nonfinite_steps, checkpoint_manager=manager, log_fn=log, is_main=ctx.is_main,
                           state=state),
    ]
    stops = dict(train_cell=train_cell, agree=ctx.max_over_ranks if ctx.distributed else None, log_fn=log,
                 is_main=ctx.is_main, state=state)
    if stop_request is not None:
        callbacks.append(StopOnSignal(stop_request, manager, **stops))
    if max_steps is not None:
        callbacks.append(StepLimit(max_steps, manager, **stops))
    if eval_fn is not None:
        callbacks.append(EvalCallback(eval_fn, cfg.eval_interval, checkpoint_manager=manager, train_cell=train_cell,
                                      total_epochs=cfg.epochs, log_fn=log, is_main=ctx.is_main, state=state))
    # the file train.py gives the datasets as bad_file_log
    callbacks.append(BadFileReport(os.path.join(output_dir, "bad_files.txt"), log_fn=log, is_main=ctx.is_main))
    callbacks.append(CheckpointCallback(manager, cfg.save_every_epochs, train_cell=train_cell,
                                        total_epochs=cfg.epochs, log_fn=log, state=state))
    callbacks.append(MetricsCSV(os.path.join(output_dir, "metrics.csv"), os.path.join(output_dir, "curves.png"),
                                append=resumed, is_main=ctx.is_main, log_fn=log,
                                steps_path=os.path.join(output_dir, "metrics_steps.csv"), state=state))
    return callbacks
