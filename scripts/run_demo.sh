#!/bin/bash
# Runs the README's demo (make demo) end to end on the bundled digits:
#   1. materialize scikit-learn's 8x8 digits as an ImageNet-layout folder (data/digits)
#   2. train dm_nfnet_nano with the full pipeline (AGC, RandAugment, Mixup, cosine, EMA, eval)
#   3. eval.py on the best checkpoint
#   4. export.py: the folded eval network as MINDIR
#   5. scripts/run_infer_cpu.sh: preprocess -> MINDIR on CPU -> postprocess
#
#   bash scripts/run_demo.sh [OUTPUT_DIR(optional, default outputs/demo)]
#
# Environment: TRAIN_ARGS passes extra train.py options, e.g. TRAIN_ARGS="--epochs 2"; PYTHON
# selects the interpreter (default: the repository's .venv).
set -euo pipefail
# shellcheck source=scripts/script_help.sh
source "$(dirname "${BASH_SOURCE[0]}")/script_help.sh"
show_help_if_asked "${BASH_SOURCE[0]}" "$@"

if [ $# -gt 1 ]; then
  print_usage "[OUTPUT_DIR(optional)]"
  exit 1
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(realpath -m -- "${1:-$ROOT/outputs/demo}")"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
CONFIG="$ROOT/src/configs/dm_nfnet_nano_digits.yaml"
DATA="$ROOT/data/digits"
cd "$ROOT"
start=$(date +%s)

echo "== 1/5 dataset: $DATA"
"$PYTHON" -m src.data.digits --output "$DATA"

echo "== 2/5 training (log: $OUT/train.log)"
read -r -a EXTRA_TRAIN_ARGS <<< "${TRAIN_ARGS:-}"  # a list of options, split on blanks
"$PYTHON" train.py --config "$CONFIG" --data_path "$DATA" --output_dir "$OUT" --overwrite_output true \
  "${EXTRA_TRAIN_ARGS[@]}"
BEST="$OUT/dm_nfnet_nano_best.ckpt"

echo "== 3/5 eval.py on $BEST"
"$PYTHON" eval.py --config "$CONFIG" --data_path "$DATA" --checkpoint "$BEST" --output "$OUT/eval.json" \
  --overwrite  # a second make demo replaces the first one's numbers

echo "== 4/5 export: $OUT/dm_nfnet_nano.mindir"
"$PYTHON" export.py --config "$CONFIG" --checkpoint "$BEST" --file_format MINDIR \
  --file_name "$OUT/dm_nfnet_nano" --overwrite

echo "== 5/5 CPU inference of the export (results in $OUT/infer)"
mkdir -p "$OUT/infer"
(cd "$OUT/infer" && bash "$ROOT/scripts/run_infer_cpu.sh" "$OUT/dm_nfnet_nano.mindir" digits "$DATA/val")

echo
echo "demo finished in $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
echo "  training log, metrics and curves: $OUT/train.log, $OUT/metrics.csv, $OUT/curves.png"
echo "  eval.py:                          $OUT/eval.json"
echo "  exported model:                   $OUT/dm_nfnet_nano.mindir"
echo "  CPU inference of the export:      $OUT/infer/acc.log"
