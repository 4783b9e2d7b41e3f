"""Peers of `aneforge bench vision`: PyTorch and ONNX Runtime running the same classifier on the
same kind of input (deterministic synthetic [batch, 3, H, W] tensors; preprocessing excluded).

  vision_peers.py checkpoint KIND OUT [TOKENIZER_DIR]            KIND with seeded random weights (ImageNet
                                                   weights are not available here; speed does
                                                   not depend on them): resnet50, mobilenet_v2
                                                   and mobilenet_v3_large as torchvision state_dicts (OUT.pth), vit-b16
                                                   as a Hugging Face directory (OUT) of
                                                   google/vit-base-patch16-224's configuration,
                                                   clip-b32 as a Hugging Face CLIPModel directory
                                                   (OUT) of openai/clip-vit-base-patch32's
                                                   configuration with TOKENIZER_DIR's tokenizer
                                                   and preprocessor files (only images are run)
  vision_peers.py torch MODEL BATCH THREADS RUNS   one JSON line
  vision_peers.py ort MODEL BATCH THREADS RUNS     one JSON line (exports MODEL to ONNX first)

MODEL: KIND:PATH, KIND one of resnet50, mobilenet_v2, mobilenet_v3_large, vit-b16, clip-b32 (its L2-normalised image
embeddings), efficientnet-lite0. Needs torch,
torchvision, transformers (ViT), onnxruntime, onnx and (for Lite0) efficientnet-lite-pytorch==0.1.0
(pip install --no-deps).
"""
import json
import os
import statistics
import sys
import tempfile
import time


def build(model):
    import torch
    kind, path = model.split(":", 1)
    if kind == "vit-b16":
        from transformers import ViTForImageClassification

        class Logits(torch.nn.Module):
            def __init__(self, vit):
                super().__init__()
                self.vit = vit

            def forward(self, x):
                return self.vit(pixel_values=x).logits

        vit = ViTForImageClassification.from_pretrained(path, dtype=torch.float32)
        return kind, Logits(vit).eval(), 224
    if kind == "clip-b32":
        from transformers import CLIPModel

        class ImageEmbeds(torch.nn.Module):
            def __init__(self, clip):
                super().__init__()
                self.vision = clip.vision_model
                self.projection = clip.visual_projection

            def forward(self, x):
                e = self.projection(self.vision(pixel_values=x).pooler_output)
                return e / e.norm(dim=-1, keepdim=True)

        clip = CLIPModel.from_pretrained(path, dtype=torch.float32)
        return kind, ImageEmbeds(clip).eval(), 224
    if kind in ("resnet50", "mobilenet_v2", "mobilenet_v3_large"):
        import torchvision
        net = getattr(torchvision.models, kind)(weights=None)
        size = 224
    elif kind == "efficientnet-lite0":
        from efficientnet_lite_pytorch import EfficientNet
        net = EfficientNet.from_name("efficientnet-lite0")
        size = 224
    else:
        raise SystemExit(f"unknown model {kind}")
    net.load_state_dict(torch.load(path, map_location="cpu"))
    net.eval()
    return kind, net, size


def inputs(batch, size):
    import numpy as np
    rng = np.random.default_rng(0)
    return rng.uniform(-2, 2, (batch, 3, size, size)).astype(np.float32)


def measure(run, batch, runs):
    run()
    run()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    med = statistics.median(wall)
    return {"images_per_s": batch / med, "best_images_per_s": batch / min(wall),
            "cpu_ms_per_image": 1e3 * statistics.median(cpu) / batch}


def main():
    cmd = sys.argv[1]
    if cmd == "checkpoint":
        import torch
        kind, out = sys.argv[2], sys.argv[3]
        torch.manual_seed(0)
        if kind == "vit-b16":
            from transformers import ViTConfig, ViTForImageClassification
            cfg = ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=3072, image_size=224, patch_size=16,
                            num_labels=1000)
            ViTForImageClassification(cfg).save_pretrained(out)
        elif kind == "clip-b32":
            import shutil
            from transformers import CLIPConfig, CLIPModel
            # CLIPConfig's defaults are openai/clip-vit-base-patch32's towers: vision ViT-B/32
            # (hidden 768, 12 layers, 224 pixels), text 512 wide, projection 512.
            CLIPModel(CLIPConfig()).save_pretrained(out)
            for name in ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json"):
                shutil.copy(os.path.join(sys.argv[4], name), os.path.join(out, name))
        else:
            import torchvision
            torch.save(getattr(torchvision.models, kind)(weights=None).state_dict(), out)
        return
    model, batch, threads, runs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    import torch
    torch.set_num_threads(threads)
    kind, net, size = build(model)
    x = inputs(batch, size)
    if cmd == "torch":
        xt = torch.from_numpy(x)

        def run():
            with torch.no_grad():
                net(xt)
        row = {"system": f"pytorch {torch.__version__}"}
    elif cmd == "ort":
        import onnxruntime as ort
        onnx_path = os.path.join(tempfile.mkdtemp(), "model.onnx")
        torch.onnx.export(net, torch.from_numpy(x), onnx_path, input_names=["x"],
                          output_names=["logits"], dynamo=False)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])

        def run():
            sess.run(None, {"x": x})
        row = {"system": f"onnxruntime {ort.__version__}"}
    else:
        raise SystemExit(f"unknown command {cmd}")
    row.update({"model": kind, "batch": batch, "threads": threads})
    row.update(measure(run, batch, runs))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
