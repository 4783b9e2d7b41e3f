"""Writes torchvision's ResNet-50 with its own random initialisation (no ImageNet weights can be
had here) as a state_dict for the MLPerf harness: OUT_DIR/resnet50_random.pth.

The weights are torchvision's default init (Kaiming-normal convolutions, BatchNorm at identity)
under a fixed seed, so the harness measures the real ResNet-50 v1.5 graph: speed does not depend
on the weight values, accuracy does and is not measured here.

    python make_resnet50.py OUT_DIR [--seed 0]
"""

import argparse
import pathlib

import torch
import torchvision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path, help="cache directory (not committed)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = torchvision.models.resnet50(weights=None).eval()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / "resnet50_random.pth"
    torch.save(model.state_dict(), path)
    params = sum(p.numel() for p in model.parameters())
    print(f"{path}: torchvision {torchvision.__version__} resnet50, {params} parameters, seed {args.seed}")


if __name__ == "__main__":
    main()
