"""Entry point: python -m mpinn.export --model FILE.npz --out FILE.onnx: a model file as an ONNX model."""
import sys

from mpinn.files.outputs import Claims, check_apart, check_file
from mpinn.host.exits import run_one_process
from mpinn.inference.onnx_export import export
from mpinn.inference.onnx_graph import OPSET
from mpinn.settings.options import Parser


def build_parser():
    p = Parser(
        prog="python -m mpinn.export",
        description="Write a model file as an ONNX model (opset %d) that ONNX Runtime, or any ONNX runtime, scores "
                    "as mpinn predicts: its inputs are the rows' hashed column ids (int64) and their raw numeric "
                    "values (float64, NaN for missing); its output the prediction (float64: P(positive), the class "
                    "probabilities or the value in the label's units). The hashing contract and the model's header "
                    "are in its metadata (docs/serving.md)." % OPSET)
    p.add_argument("--model", required=True, metavar="FILE", help="model file (.npz) written by mpinn.train")
    p.add_argument("--out", required=True, metavar="FILE", help="the ONNX model to write (.onnx); parameters past 2 "
                                                               "GiB go to FILE.data beside it")
    return p


def run(args):
    check_file(args.out, "--out")
    check_apart([("--out", args.out, False)], [("--model", args.model)])
    with Claims([("--out", args.out, False)]):
        done = export(args.model, args.out)
    print("ONNX model written to %s (opset %d, %.1f MB%s; %d parameter vector%s)" % (
        done["path"], done["opset"], done["bytes"] / 1e6, ", parameters in %s (%.1f MB)" % (
            done["external"], done["external_bytes"] / 1e6) if done["external"] else "",
        done["members"], "" if done["members"] == 1 else "s averaged"))
    return 0


def main(argv=None):
    return run_one_process(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
