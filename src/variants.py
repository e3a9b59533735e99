"""The NFNet variant table: one row per network, read by the model, the config schema and the YAMLs.

DeepMind's nfnets/base.py `nfnet_params` gives each F variant its widths, depths, train and
test image sizes, dropout and RandAugment level ('RA_level' '4MM': 4 layers of magnitude MM);
the rows below transcribe it (Brock et al. 2021, arXiv 2102.06171, Table 7). Nothing else in
the project spells these numbers out:

- src/models/nfnet.py builds each registered network from its row (widths, depths);
- src/config.py takes the allowed `arch` names and F0's row as the schema defaults, and checks
  that a config's `depths` are its arch's;
- tools/variant_configs.py writes the F1-F6 YAMLs from the F0 YAML of each recipe and the
  rows (tests/tools/test_variant_configs.py checks they are current).

Standard library only, so that checking a config never imports MindSpore.
"""
from dataclasses import dataclass
from typing import Tuple

F_WIDTHS = (256, 512, 1536, 1536)


@dataclass(frozen=True)
class Variant:
    """One row of `nfnet_params`; `ra_magnitude` is the MM of DeepMind's RA_level '4MM'."""

    depths: Tuple[int, int, int, int]
    train_size: int
    test_size: int
    drop_rate: float
    ra_magnitude: int
    widths: Tuple[int, int, int, int] = F_WIDTHS


VARIANTS = {
    "dm_nfnet_f0": Variant((1, 2, 6, 3), 192, 256, 0.2, 5),
    "dm_nfnet_f1": Variant((2, 4, 12, 6), 224, 320, 0.3, 10),
    "dm_nfnet_f2": Variant((3, 6, 18, 9), 256, 352, 0.4, 10),
    "dm_nfnet_f3": Variant((4, 8, 24, 12), 320, 416, 0.4, 15),
    "dm_nfnet_f4": Variant((5, 10, 30, 15), 384, 512, 0.5, 15),
    "dm_nfnet_f5": Variant((6, 12, 36, 18), 416, 544, 0.5, 15),
    "dm_nfnet_f6": Variant((7, 14, 42, 21), 448, 576, 0.5, 15),
    # This project's small CPU demo net: every mechanism of the F family at ~1/100 of F0's
    # size (src/configs/dm_nfnet_nano_digits.yaml trains it on 64x64 digits).
    "dm_nfnet_nano": Variant((1, 1, 1, 1), 64, 64, 0.1, 5, widths=(64, 128, 256, 256)),
}

F_VARIANTS = tuple(name for name in VARIANTS if name.startswith("dm_nfnet_f"))
