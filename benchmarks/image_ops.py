"""PIL against OpenCV on the training pipeline's per-image steps, one thread, the same JPEGs.

    python -m benchmarks.image_ops [--num_images 64] [--rounds 5]

Times, per image and single-threaded (each pipeline worker is one process on one core), the
steps of the F0 training transform (src/data/transforms.py: create_train_transform) as the
project runs them in PIL, beside the nearest OpenCV call:

  decode       PIL Image.open + load + RGB (transforms.load_image) | cv2.imdecode + BGR->RGB
  crop+resize  a RandomResizedCrop box of the image resized to 192: PIL bicubic (antialiased,
               what the pipeline and timm use) | cv2.resize INTER_CUBIC (not antialiased) and
               INTER_AREA
  RandAugment  the whole rand-m5-n4-mstd0.5-inc1 on a 192x192 image (PIL; no OpenCV form exists
               in the project), and three of its colour ops at a fixed magnitude:
               Contrast, Color (saturation) and Equalize | OpenCV/NumPy equivalents; each RandAugment
               op at magnitude 5 (PIL); rotate and shear as in RandAugment | cv2.warpAffine
  normalize    ToNormalizedCHW (NumPy)
  whole        the full train transform on a decoded image, and decode + transform

The steps take turns in ``rounds`` rounds over the same images (the files in the page cache), and
each step's time is the median over rounds of its mean per image, so that load changes on a
shared machine hit every step alike. The evaluation transform is not measured: it stays PIL
bicubic (timm parity).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):  # python benchmarks/image_ops.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CROP_SIZE = 192
FILL = (124, 116, 104)  # RandAugment's fill: the ImageNet mean in 0..255
SHEAR_X = (1, 0.15, 0, 0, 1, 0)  # PIL's inverse affine map (output -> input), as image_ops.shear_x


def _opencv():
    import cv2

    cv2.setNumThreads(1)  # one core per pipeline worker, as PIL
    return cv2


def pil_steps(paths, crop_boxes):
    """{step: (callable over one image index)} of the PIL forms (the pipeline's own)."""
    from PIL import Image, ImageEnhance, ImageOps

    from src.data.transforms import ToNormalizedCHW, create_rand_augment, create_train_transform, load_image

    images = [load_image(path) for path in paths]
    crops = [img.crop(box).resize((CROP_SIZE, CROP_SIZE), Image.Resampling.BICUBIC)
             for img, box in zip(images, crop_boxes)]
    augment = create_rand_augment("rand-m5-n4-mstd0.5-inc1", CROP_SIZE)
    transform = create_train_transform(CROP_SIZE, auto_augment="rand-m5-n4-mstd0.5-inc1")
    normalize = ToNormalizedCHW()
    return {
        "decode": lambda i: load_image(paths[i]),
        "crop+resize bicubic": lambda i: images[i].crop(crop_boxes[i]).resize((CROP_SIZE, CROP_SIZE),
                                                                               Image.Resampling.BICUBIC),
        "RandAugment (4 ops, p 0.5)": lambda i: augment(crops[i]),
        "contrast 1.5": lambda i: ImageEnhance.Contrast(crops[i]).enhance(1.5),
        "color 1.5": lambda i: ImageEnhance.Color(crops[i]).enhance(1.5),
        "equalize": lambda i: ImageOps.equalize(crops[i]),
        "normalize": lambda i: normalize(crops[i]),
        "train transform": lambda i: transform(images[i]),
        "decode + train transform": lambda i: transform(load_image(paths[i])),
        "rotate 15 bicubic": lambda i: crops[i].rotate(15, resample=Image.Resampling.BICUBIC, fillcolor=FILL),
        "shear x 0.15 bicubic": lambda i: crops[i].transform(crops[i].size, Image.Transform.AFFINE, SHEAR_X,
                                                              resample=Image.Resampling.BICUBIC, fillcolor=FILL),
        "shear x 0.15 bilinear": lambda i: crops[i].transform(crops[i].size, Image.Transform.AFFINE, SHEAR_X,
                                                               resample=Image.Resampling.BILINEAR, fillcolor=FILL),
        **{f"RA {op.name} m5": (lambda i, op=op: op.apply(crops[i], 5)) for op in augment.ops},
        # PIL-side alternatives: JPEG DCT scaling down to what the crop needs, and resize's reducing_gap
        "decode draft for the crop": lambda i: decode_draft(paths[i], crop_boxes[i]),
        "crop+resize bicubic gap 3": lambda i: images[i].crop(crop_boxes[i]).resize(
            (CROP_SIZE, CROP_SIZE), Image.Resampling.BICUBIC, reducing_gap=3.0),
    }


def decode_draft(path, box):
    """Decode with libjpeg's DCT scaling (1/2, 1/4, 1/8) as far as the crop ``box`` stays >= CROP_SIZE."""
    from PIL import Image

    img = Image.open(path)
    width, height = img.size
    crop_w, crop_h = box[2] - box[0], box[3] - box[1]
    img.draft("RGB", (-(-width * CROP_SIZE // crop_w), -(-height * CROP_SIZE // crop_h)))
    img.load()
    return img


def opencv_steps(paths, crop_boxes):
    """{step: callable} of the nearest OpenCV forms; the per-crop ops take the PIL crops as RGB arrays."""
    import numpy as np
    from PIL import Image

    from src.data.transforms import load_image

    cv2 = _opencv()
    data = [np.fromfile(path, np.uint8) for path in paths]

    def decode(i):
        return cv2.cvtColor(cv2.imdecode(data[i], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    images = [decode(i) for i in range(len(paths))]

    def crop(i):
        left, top, right, bottom = crop_boxes[i]
        return images[i][top:bottom, left:right]

    crops = [np.asarray(load_image(path).crop(box).resize((CROP_SIZE, CROP_SIZE), Image.Resampling.BICUBIC))
             for path, box in zip(paths, crop_boxes)]

    def contrast(i, factor=1.5):  # PIL: blend with the mean of the grey image
        img = crops[i]
        mean = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).mean()
        return cv2.addWeighted(img, factor, np.full_like(img, int(mean + 0.5)), 1 - factor, 0)

    def color(i, factor=1.5):  # PIL: blend with the grey image
        img = crops[i]
        grey = cv2.cvtColor(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)
        return cv2.addWeighted(img, factor, grey, 1 - factor, 0)

    def equalize(i):
        return cv2.merge([cv2.equalizeHist(channel) for channel in cv2.split(crops[i])])

    def rotate(i, degrees=15):
        matrix = cv2.getRotationMatrix2D(((CROP_SIZE - 1) / 2, (CROP_SIZE - 1) / 2), degrees, 1.0)
        return cv2.warpAffine(crops[i], matrix, (CROP_SIZE, CROP_SIZE), flags=cv2.INTER_CUBIC,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=FILL)

    def shear_x(i, interpolation):  # the same inverse map as PIL's, through WARP_INVERSE_MAP
        matrix = np.asarray(SHEAR_X, np.float64).reshape(2, 3)
        return cv2.warpAffine(crops[i], matrix, (CROP_SIZE, CROP_SIZE), flags=interpolation | cv2.WARP_INVERSE_MAP,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=FILL)

    return {
        "decode": decode,
        "crop+resize bicubic": lambda i: cv2.resize(crop(i), (CROP_SIZE, CROP_SIZE), interpolation=cv2.INTER_CUBIC),
        "crop+resize area": lambda i: cv2.resize(crop(i), (CROP_SIZE, CROP_SIZE), interpolation=cv2.INTER_AREA),
        "contrast 1.5": contrast,
        "color 1.5": color,
        "equalize": equalize,
        "rotate 15 bicubic": rotate,
        "shear x 0.15 bicubic": lambda i: shear_x(i, cv2.INTER_CUBIC),
        "shear x 0.15 bilinear": lambda i: shear_x(i, cv2.INTER_LINEAR),
    }


def crop_boxes_for(paths, seed=0):
    """One RandomResizedCrop box (left, top, right, bottom) per image, the F0 scale and ratio ranges."""
    import numpy as np
    from PIL import Image

    from src.data.transforms import RandomResizedCrop

    np.random.seed(seed)
    rrc = RandomResizedCrop(CROP_SIZE, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    boxes = []
    for path in paths:
        with Image.open(path) as img:
            top, left, h, w = rrc.get_params(img.width, img.height)
        boxes.append((left, top, left + w, top + h))
    return boxes


def measure(paths, rounds=5):
    """{library: {step: ms per image}} (median over rounds of the mean over the images)."""
    boxes = crop_boxes_for(paths)
    steps = {"PIL": pil_steps(paths, boxes), "OpenCV": opencv_steps(paths, boxes)}
    times = {library: {step: [] for step in fns} for library, fns in steps.items()}
    for _ in range(rounds):
        for library, fns in steps.items():
            for step, fn in fns.items():
                start = time.perf_counter()
                for i in range(len(paths)):
                    fn(i)
                times[library][step].append(1000 * (time.perf_counter() - start) / len(paths))
    return {library: {step: round(statistics.median(values), 3) for step, values in by_step.items()}
            for library, by_step in times.items()}


def format_table(result):
    steps = list(dict.fromkeys([*result["PIL"], *result["OpenCV"]]))
    lines = [f"{'ms per image (1 thread)':<28}{'PIL':>8}{'OpenCV':>9}{'PIL/OpenCV':>12}"]
    for step in steps:
        pil, cv = result["PIL"].get(step), result["OpenCV"].get(step)
        ratio = f"{pil / cv:.2f}x" if pil and cv else ""
        lines.append(f"{step:<28}{pil if pil is not None else '':>8}{cv if cv is not None else '':>9}{ratio:>12}")
    return "\n".join(lines)


def main(argv=None):
    from benchmarks.data_pipeline import write_jpegs

    parser = argparse.ArgumentParser(description="PIL against OpenCV on the training pipeline's per-image steps.")
    parser.add_argument("--num_images", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.num_images < 1 or args.rounds < 1:
        parser.error("--num_images and --rounds must be >= 1")
    with tempfile.TemporaryDirectory(prefix="image_ops_") as tmp:
        write_jpegs(tmp, args.num_images)
        paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(tmp) for name in names)
        result = measure(paths, args.rounds)
    print(format_table(result))
    return result


if __name__ == "__main__":
    main()
