"""Deployment: fold weight standardization, export MINDIR/ONNX/AIR, .bin tensors in and out, accuracy.

The path of one validation image on a device::

    preprocess.py   image -> src.data eval transform -> <name>.bin (float32 NCHW) + labels.json
    export.py       checkpoint -> eval network, weight standardization folded -> .mindir / .onnx / .air
    ascend310_infer (C++) or src.deploy.infer_cpu (MindSpore Python)
                    <name>.bin -> result_Files/<name>_0.bin (float32 logits)
    postprocess.py  result_Files + labels.json -> top-1 / top-5 JSON

Modules that only touch files and NumPy (binio, postprocess; the top-k rule in src/accuracy.py) do not
import MindSpore, so postprocess.py runs on a machine without it.
"""
