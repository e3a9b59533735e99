"""train.py, held inside the write of one checkpoint so that a test can kill -9 it there.

The checkpoint whose name starts with $PAUSE_IN_WRITE_OF (e.g. dm_nfnet_nano-2_14) is written for real by
src.run.checkpointing.save_checkpoint_atomic. Once MindSpore has written its hidden temporary file,
and before that file is fsynced and renamed into place, this prints `writing <temporary file>` and sleeps.
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import mindspore  # noqa: E402

import train  # noqa: E402
from src.errors import run_cli  # noqa: E402


def main():
    hidden_prefix = "." + os.environ["PAUSE_IN_WRITE_OF"]
    save_checkpoint = mindspore.save_checkpoint

    def save_then_pause(save_obj, ckpt_file_name, *args, **kwargs):
        save_checkpoint(save_obj, ckpt_file_name, *args, **kwargs)
        if os.path.basename(ckpt_file_name).startswith(hidden_prefix):
            print(f"writing {ckpt_file_name}", flush=True)
            time.sleep(3600)

    mindspore.save_checkpoint = save_then_pause  # what src.run.checkpointing calls as ms.save_checkpoint
    return train.main(sys.argv[1:])


if __name__ == "__main__":
    run_cli(main)
