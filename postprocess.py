"""Score inference results: top-1 / top-5 of result_Files/<name>_0.bin against labels.json.

    python postprocess.py --result_path result_Files --label_path preprocess_Result/labels.json \
        [--output acc.json] [--num_classes 1000]

Prints the accuracy and image count and writes them as JSON with the keys eval.py uses
(top1, top5 as fractions, count, correct_top1, correct_top5). Needs NumPy only. An existing
--output is kept unless --overwrite (never the labels or a result file), checked before scoring.
"""
import argparse
import json

from src.errors import run_cli


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Top-1/top-5 of inference results against preprocess labels.")
    parser.add_argument("--result_path", required=True, help="folder of <name>_0.bin logits")
    parser.add_argument("--label_path", required=True, help="labels.json written by preprocess.py")
    parser.add_argument("--output", default="postprocess_result.json", help="JSON file for the report")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument("--num_classes", type=int, default=None, help="check the logits per image")
    return parser.parse_args(argv)


def main(argv=None):
    from src.deploy.binio import write_json
    from src.deploy.cli import check_output
    from src.deploy.postprocess import evaluate_results, format_report

    args = parse_args(argv)
    check_output("--output", args.output, [args.label_path, args.result_path], overwrite=args.overwrite,
                 make_parents=True)
    report = evaluate_results(args.result_path, args.label_path, args.num_classes)
    write_json(args.output, report)
    print(format_report(report))
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    run_cli(main)
