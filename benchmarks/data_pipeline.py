"""Training input pipeline throughput: an image folder vs MindRecord, on the same JPEGs.

    python -m benchmarks.data_pipeline [--num_images 256] [--workers 2] [--rounds 3] [--epochs 2] [--batch_size 32]

Writes ``num_images`` random-content JPEGs of a typical ImageNet size (500x375, landscape
and portrait alternating) in a class-folder layout to a temporary directory, converts them
with src.data.to_mindrecord, and runs the project's training pipeline over each:
build_train_dataset -> create_dataset with the F0 config's training transforms (decode,
RandomResizedCrop 192, flip, RandAugment rand-m5-n4-mstd0.5-inc1, normalize) and its
Mixup/CutMix, ``workers`` worker processes. The two sources take turns in rounds (a fresh
pipeline, one warm-up epoch, then timed epochs; the files are in the page cache for both), and
each one's img/s is the median over its timed epochs, so that load changes on a shared machine
hit both sources alike.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):  # python benchmarks/data_pipeline.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F0_CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_f0.yaml")
IMAGE_SIZE = (500, 375)  # width, height: a typical ImageNet photo
NUM_CLASSES = 8


def write_jpegs(root, num_images, size=IMAGE_SIZE, num_classes=NUM_CLASSES, seed=0, quality=90):
    """``root/train/<class>/<i>.JPEG`` with random smooth content plus noise; returns the mean file size in bytes.

    Colour fields (a random 63x47 image upscaled) with +-30 pixel noise at quality 90 make files of
    about 110 KB, ImageNet's average (ILSVRC2012_img_train.tar is "about 138 GB" for 1,281,167
    images, pytorch/examples imagenet/extract_ILSVRC.sh);
    pure noise would make 3x larger files, slower to decode.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    total = 0
    for i in range(num_images):
        width, height = size if i % 2 == 0 else size[::-1]
        coarse = Image.fromarray(rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8))
        pixels = np.asarray(coarse.resize((width, height), Image.BICUBIC), dtype=np.int16)
        pixels = np.clip(pixels + rng.integers(-30, 31, pixels.shape), 0, 255).astype(np.uint8)
        folder = os.path.join(root, "train", f"class_{i % num_classes:02d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{i:05d}.JPEG")
        Image.fromarray(pixels).save(path, quality=quality)
        total += os.path.getsize(path)
    return total / num_images


def pipeline_img_per_s(data_path, workers, epochs, batch_size, config=F0_CONFIG):
    """img/s of each of ``epochs`` timed epochs of a fresh pipeline, after one warm-up epoch."""
    from src import builders
    from src.config import load_config
    from src.run.context import RunContext

    cfg = load_config(config, {"data_path": data_path, "num_parallel_workers": workers, "batch_size": batch_size})
    dataset, _ = builders.build_train_dataset(cfg, RunContext())
    iterator = dataset.create_tuple_iterator(num_epochs=epochs + 1, output_numpy=True)
    rates = []
    for epoch in range(epochs + 1):
        start, images = time.perf_counter(), 0
        for image, _ in iterator:
            images += image.shape[0]
        if epoch:  # epoch 0 warms up: worker start-up, page cache
            rates.append(images / (time.perf_counter() - start))
    iterator.stop()  # its workers stop before the other source is timed
    return rates


def measure_folder_vs_mindrecord(num_images=256, workers=2, rounds=3, epochs=2, batch_size=32, workdir=None,
                                 seed=0):
    """Training-pipeline img/s on the same generated JPEGs read from a folder and from MindRecord.

    The sources take turns: each of ``rounds`` rounds runs a fresh pipeline per source (order
    alternating) for a warm-up epoch and ``epochs`` timed epochs, so a change of machine load
    hits both. Returns a dict: folder_img_s and mindrecord_img_s (medians over all timed
    epochs), mindrecord_vs_folder (their ratio, > 1: MindRecord faster), *_epochs_img_s
    (every timed epoch), convert_s, mean_jpeg_kb and the settings. ``workdir`` keeps the
    generated data (default: a temporary directory, removed afterwards).
    """
    import mindspore as ms

    from src.data.to_mindrecord import convert_split

    ms.set_device("CPU")
    with tempfile.TemporaryDirectory(prefix="data_pipeline_") as tmp:
        base = workdir or tmp
        paths = {"folder": os.path.join(base, "folder"), "mindrecord": os.path.join(base, "mindrecord")}
        mean_bytes = write_jpegs(paths["folder"], num_images, seed=seed)
        start = time.perf_counter()
        written, _ = convert_split(paths["folder"], "train", paths["mindrecord"])
        convert_s = time.perf_counter() - start
        if written != num_images:
            raise RuntimeError(f"{written} of {num_images} images converted")
        rates = {"folder": [], "mindrecord": []}
        for index in range(rounds):
            for source in sorted(rates, reverse=index % 2 == 1):
                rates[source] += pipeline_img_per_s(paths[source], workers, epochs, batch_size)
    folder, record = statistics.median(rates["folder"]), statistics.median(rates["mindrecord"])
    return {
        "num_images": num_images, "workers": workers, "rounds": rounds, "epochs": epochs, "batch_size": batch_size,
        "image_size": list(IMAGE_SIZE), "mean_jpeg_kb": round(mean_bytes / 1024, 1),
        "folder_img_s": round(folder, 1), "mindrecord_img_s": round(record, 1),
        "mindrecord_vs_folder": round(record / folder, 3),
        "folder_epochs_img_s": [round(r, 1) for r in rates["folder"]],
        "mindrecord_epochs_img_s": [round(r, 1) for r in rates["mindrecord"]],
        "convert_s": round(convert_s, 2),
    }


def format_table(result):
    rows = [("source", "img/s", "every timed epoch (img/s)")]
    for name, key in (("folder", "folder"), ("MindRecord", "mindrecord")):
        rows.append((name, f"{result[key + '_img_s']:.1f}", " ".join(map(str, result[key + "_epochs_img_s"]))))
    lines = [f"{a:<12}{b:>8}   {c}" for a, b, c in rows]
    lines.append(f"MindRecord / folder: {result['mindrecord_vs_folder']:.2f}x; {result['num_images']} JPEGs of "
                 f"{result['image_size'][0]}x{result['image_size'][1]} (mean {result['mean_jpeg_kb']} KB), "
                 f"batch {result['batch_size']}, {result['workers']} workers; medians of {result['rounds']} "
                 f"alternating rounds x {result['epochs']} epochs after a warm-up; conversion {result['convert_s']} s")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Training-pipeline img/s: image folder vs MindRecord.")
    parser.add_argument("--num_images", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds in which the two sources take turns")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per round (after a warm-up epoch)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--workdir", help="keep the generated folder and MindRecord here")
    args = parser.parse_args(argv)
    if args.num_images < args.batch_size:
        parser.error(f"--num_images {args.num_images} is less than one batch of {args.batch_size}")
    result = measure_folder_vs_mindrecord(args.num_images, args.workers, args.rounds, args.epochs, args.batch_size,
                                          args.workdir)
    print(format_table(result))
    return result


if __name__ == "__main__":
    main()
