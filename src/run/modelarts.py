"""ModelArts: the dataset copied in from OBS (data_url) before a run, the results out to train_url after.

Used only when ``enable_modelarts`` is set; ``moxing`` (shipped in ModelArts images) is imported
then and only then. train.py and eval.py use it as

    check_before_init(cfg, check_inputs)  # the settings, or the local data, before MindSpore starts
    ...
    with data_and_results(cfg, ctx, output_dir, check_inputs):  # modelarts_io with cfg's settings
        ... train or evaluate ...

On a node with several processes one of them (``is_copier``) copies the data and leaves a
marker file; the others wait for it. ``local_dir`` is expected to start without data of an
earlier job (ModelArts gives each job a fresh /cache, its local SSD). The results (a run
directory, or a single file such as eval.py's metrics) are copied out by rank 0 (``is_main``)
when the block ends, also when it ends with an error, so a failed run's logs reach OBS too.
mox.file.copy copies one file and mox.file.copy_parallel a folder (Huawei Cloud, "Basic MoXing
Functions": https://support.huaweicloud.com/develop-modelarts/develop-moxing-0002.html).
"""
import os
import time
from contextlib import contextmanager

from src.errors import UserError

LOCAL_DATA = "/cache/data"
_COPIED_MARK = ".modelarts_copied"


def import_moxing():
    """The ``moxing`` module, or a one-line UserError when it is not installed."""
    try:
        import moxing  # noqa: PLC0415 (imported only on ModelArts)
    except ImportError as exc:
        raise UserError("enable_modelarts is set but the 'moxing' package is not installed (it ships with "
                        "ModelArts images): run on ModelArts or set enable_modelarts false") from exc
    return moxing


def check_settings(data_url, train_url):
    """The ``moxing`` module once both URLs are set; one-line UserErrors otherwise (cheap: call it early)."""
    if not data_url or not train_url:
        raise UserError("enable_modelarts needs data_url (the dataset on OBS) and train_url (where the "
                        f"results go); got data_url {data_url!r}, train_url {train_url!r}")
    return import_moxing()


def copy_data_in(mox, data_url, local_dir=LOCAL_DATA, is_copier=True, timeout=3600, poll=5.0):
    """Copy ``data_url`` to ``local_dir`` (is_copier) or wait until the copier has; returns local_dir."""
    mark = os.path.join(local_dir, _COPIED_MARK)
    if is_copier:
        os.makedirs(local_dir, exist_ok=True)
        mox.file.copy_parallel(data_url, local_dir)
        with open(mark, "w", encoding="utf-8") as f:
            f.write(data_url + "\n")
        return local_dir
    deadline = time.time() + timeout
    while not os.path.exists(mark):
        if time.time() > deadline:
            raise UserError(f"ModelArts: {data_url} was not copied to {local_dir} within {timeout} s")
        time.sleep(poll)
    return local_dir


def copy_results_out(mox, results, train_url):
    """Copy a run directory to ``train_url``, or a file into it; nothing when ``results`` does not exist
    (or is None: train.py decides its run directory once the inputs are checked, and passes a callable)."""
    results = results() if callable(results) else results
    if results is None:
        return
    if os.path.isdir(results):
        mox.file.copy_parallel(results, train_url)
    elif os.path.isfile(results):
        mox.file.copy(results, train_url.rstrip("/") + "/" + os.path.basename(results))


@contextmanager
def modelarts_io(enable, data_url, train_url, results, local_dir=LOCAL_DATA, is_copier=True, is_main=True,
                 timeout=3600):
    """Yield the local data directory (None when ``enable`` is false: nothing is imported or copied)."""
    if not enable:
        yield None
        return
    mox = check_settings(data_url, train_url)
    local = copy_data_in(mox, data_url, local_dir, is_copier=is_copier, timeout=timeout)
    try:
        yield local
    finally:
        if is_main:
            copy_results_out(mox, results, train_url)


def check_before_init(cfg, check_data):
    """The checks an entry point runs before MindSpore starts: the ModelArts settings when
    enabled (the data only arrives with the copy; None), else ``check_data(cfg)`` on the local data
    (returned: train.py's dataset listing)."""
    if cfg.enable_modelarts:
        check_settings(cfg.data_url, cfg.train_url)
        return None
    return check_data(cfg)


@contextmanager
def data_and_results(cfg, ctx, results, check_data):
    """``modelarts_io`` for an entry point: the data copied in (then ``check_data(cfg)`` on the
    copy, its result yielded), ``results`` copied out when the block ends; nothing (None) when ModelArts is off."""
    with modelarts_io(cfg.enable_modelarts, cfg.data_url, cfg.train_url, results, local_dir=cfg.data_path,
                      is_copier=ctx.local_rank == 0, is_main=ctx.is_main):
        yield check_data(cfg) if cfg.enable_modelarts else None
