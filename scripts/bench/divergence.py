#!/usr/bin/env python3
"""Benchmark: is the first divergent node the one that changed?

For each model, ``--trials`` times: a random node with weights (Conv or Gemm) is chosen,
its weight tensor changed by 1 % and the model saved; the golden set was made from the
unchanged model with its intermediate tensors (``golden make --intermediates``); the
agent's ``divergence`` worker job (a real worker process, onnxruntime) then re-runs one
case of the changed model with every intermediate tensor kept and names the first node
past tolerance (``measure/divergence.py``). A trial is right when the named node is the
changed one. Two kinds of 1 % change:

- ``scale``: the whole weight tensor times 1.01;
- ``jitter``: each weight times 1 ± 0.01 (the sign at random), a perturbation with no
  common direction, whose effect on the node's output is smaller than the scale's.

Models: the example CNN (``mid``: 6 Conv+ReLU, pool, Gemm, softmax; 16 nodes) and a
residual CNN built here (``resnet``: a stem and 12 blocks of Conv, ReLU, Conv, Add, ReLU,
then pool, Gemm, softmax; 65 nodes). ``--budget-kb`` also runs the deep model's trials
range by range under that memory budget (the node named must be the same).

Then the int8 example (``classifier_qdq``) made to saturate on purpose: the ReLU's
quantization scale an eighth of its calibrated value, so its uint8 QuantizeLinear clips;
right when the node named is that QuantizeLinear and its output is flagged saturated.

Target (the divergence issue): the named node right in at least 95 % of the trials of
each model; the saturating int8 example named at its first saturating node.
Prints one JSON object; progress goes to stderr.

    python scripts/bench/divergence.py [--trials 20] [--seed 0] [--budget-kb 256]
        [--models mid,resnet] [--kinds scale,jitter]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

RESNET_BLOCKS = 12
RESNET_CHANNELS = 16


def build_resnet(path: Path, seed: int = 7) -> None:
    """The residual CNN: image [1,3,32,32] -> stem Conv+ReLU -> 12 residual blocks -> pool
    -> Gemm(10) -> softmax; every node named (``block3.conv2``), He-initialised weights."""
    from edgequal.host.examples.onnx_models import onnx_model, write_onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    ch = RESNET_CHANNELS
    nodes, inits = [], []

    def conv(name: str, src: str, cin: int, gain: float = 1.0) -> str:
        std = gain * np.sqrt(2.0 / (cin * 9))
        w = rng.normal(0.0, std, size=(ch, cin, 3, 3)).astype(np.float32)
        b = rng.normal(0.0, 0.01, size=ch).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.weight"),
                      numpy_helper.from_array(b, f"{name}.bias")])  # fmt: skip
        nodes.append(
            helper.make_node(
                "Conv",
                [src, f"{name}.weight", f"{name}.bias"],
                [name],
                name=name,
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
            )  # fmt: skip
        )
        return name

    def relu(name: str, src: str) -> str:
        nodes.append(helper.make_node("Relu", [src], [name], name=name))
        return name

    x = relu("stem.relu", conv("stem.conv", "image", 3))
    for i in range(RESNET_BLOCKS):
        h = relu(f"block{i}.relu1", conv(f"block{i}.conv1", x, ch))
        # The second conv scaled down, as residual branches are, so the sum stays bounded.
        h = conv(f"block{i}.conv2", h, ch, gain=0.5)
        nodes.append(helper.make_node("Add", [x, h], [f"block{i}.add"], name=f"block{i}.add"))
        x = relu(f"block{i}.relu2", f"block{i}.add")
    fc_w = rng.normal(0.0, 1.0 / np.sqrt(ch), size=(ch, 10)).astype(np.float32)
    inits += [numpy_helper.from_array(fc_w, "fc.weight"),
              numpy_helper.from_array(np.zeros(10, np.float32), "fc.bias")]  # fmt: skip
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["features"], name="flatten", axis=1),
        helper.make_node("Gemm", ["features", "fc.weight", "fc.bias"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    model = onnx_model(
        nodes,
        "resnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        inits,
        "residual CNN for the divergence benchmark",
    )
    write_onnx(model, path)


def weighted_nodes(model: Path) -> list[tuple[int, str, str]]:
    """``(index, label, weight tensor)`` of every Conv and Gemm node."""
    import onnx
    from edgequal.agent.measure.divergence import node_label

    m = onnx.load(model)
    out = []
    for i, node in enumerate(m.graph.node):
        if node.op_type in ("Conv", "Gemm"):
            entry = {"name": node.name, "outputs": list(node.output)}
            out.append((i, node_label(entry, i), node.input[1]))
    return out


def planted(model: Path, out: Path, tensor: str, kind: str, rng, factor: float = 0.01) -> None:
    """``model`` with ``tensor`` changed by ``factor`` (scale or jitter), saved at ``out``."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(model)
    for init in m.graph.initializer:
        if init.name == tensor:
            w = numpy_helper.to_array(init).astype(np.float64)
            if kind == "scale":
                w = w * (1 + factor)
            elif kind == "jitter":
                w = w * (1 + factor * rng.choice([-1.0, 1.0], size=w.shape))
            else:
                w = w * factor  # a given multiplier (the saturating int8 scale)
            init.CopyFrom(numpy_helper.from_array(w.astype(np.float32), init.name))
    onnx.save(m, out)


def localize(model: Path, golden: Path, case: str, budget_bytes: int | None = None) -> dict:
    """The agent's ``divergence`` job in a real worker: the changed model against the
    golden set's intermediates."""
    from edgequal.agent.worker.jobs import DivergenceSettings, WorkerJob
    from edgequal.agent.worker.supervisor import run_job
    from edgequal.contract.plan import make_plan

    settings = DivergenceSettings(case=case)
    if budget_bytes is not None:
        settings = replace(settings, budget_bytes=budget_bytes)
    job = WorkerJob.for_phase("divergence", model, golden, make_plan("quick"), "onnxruntime")
    ended = run_job(replace(job, divergence=settings).to_json())
    if not ended.ok:
        raise SystemExit(f"divergence worker failed: {ended.error or ended.describe()}")
    return ended.result


def golden_for(model: Path, out: Path, name: str, cases: int, seed: int) -> None:
    from edgequal.host.golden import make_golden

    rng = np.random.default_rng(seed)
    if name in ("mid", "classifier_qdq"):
        from edgequal.host.examples.catalog import example_inputs

        feeds = example_inputs(name, cases, seed)
    else:
        feeds = [{"image": rng.random((1, 3, 32, 32), dtype=np.float32)} for _ in range(cases)]
    make_golden(model, {f"c{i}": f for i, f in enumerate(feeds)}, out, intermediates=True)


def run_model(name: str, work: Path, trials: int, kinds, seed: int, budget_kb: int | None):
    from edgequal.host.examples.catalog import build_example

    model = build_example(name, work) if name == "mid" else work / f"{name}.onnx"
    if name == "resnet":
        build_resnet(model)
    golden = work / f"{name}.golden.npz"
    golden_for(model, golden, name, 2, seed)
    import onnx

    n_nodes = len(onnx.load(model).graph.node)
    candidates = weighted_nodes(model)
    rng = np.random.default_rng(seed)
    out = {"nodes": n_nodes, "weighted_nodes": len(candidates), "kinds": {}}
    for kind in kinds:
        rows = []
        for t in range(trials):
            index, label, tensor = candidates[int(rng.integers(len(candidates)))]
            changed = work / f"{name}.{kind}.{t}.onnx"
            planted(model, changed, tensor, kind, rng)
            t0 = time.perf_counter()
            result = localize(changed, golden, "c1")
            wall = time.perf_counter() - t0
            loc = result["localization"]
            row = {"planted": label, "named": loc.get("node"), "right": loc.get("node") == label,
                   "ratio": loc.get("ratio"), "wall_s": round(wall, 2)}  # fmt: skip
            if budget_kb is not None and name == "resnet":
                ranged = localize(changed, golden, "c1", budget_kb * 1024)
                row["ranged_named"] = ranged["localization"].get("node")
                row["ranges"] = [ranged["ranges_run"], ranged["ranges"]]
            rows.append(row)
            changed.unlink()
            print(f"{name} {kind} {t}: planted {label}, named {row['named']}", file=sys.stderr)
        right = sum(r["right"] for r in rows)
        summary = {"trials": trials, "right": right, "share": right / trials,
                   "min_ratio_when_right": min((r["ratio"] for r in rows if r["right"]),
                                               default=None),
                   "median_wall_s": float(np.median([r["wall_s"] for r in rows])),
                   "wrong": [r for r in rows if not r["right"]]}  # fmt: skip
        if any("ranged_named" in r for r in rows):
            summary["ranged_same"] = sum(r["ranged_named"] == r["named"] for r in rows)
            summary["ranges_run_of"] = rows[0]["ranges"]
        out["kinds"][kind] = summary
    return out


def run_saturation(work: Path, seed: int) -> dict:
    from edgequal.host.examples.catalog import build_example

    model = build_example("classifier_qdq", work)
    golden = work / "qdq.golden.npz"
    golden_for(model, golden, "classifier_qdq", 2, seed)
    changed = work / "qdq.saturating.onnx"
    planted(model, changed, "relu.scale", "multiply", None, factor=1 / 8)
    loc = localize(changed, golden, "c0")["localization"]
    return {
        "named": loc.get("node"),
        "op_type": loc.get("op_type"),
        "output": loc.get("output"),
        "saturation": loc.get("saturation"),
        "right": loc.get("output") == "relu_q"
        and bool((loc.get("saturation") or {}).get("saturated")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default="mid,resnet")
    ap.add_argument("--kinds", default="scale,jitter")
    ap.add_argument("--budget-kb", type=int, default=None)
    args = ap.parse_args()
    import onnxruntime

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="edgequal-divergence-") as tmp:
        work = Path(tmp)
        models = {
            name: run_model(
                name, work, args.trials, args.kinds.split(","), args.seed, args.budget_kb
            )  # fmt: skip
            for name in args.models.split(",")
        }
        saturation = run_saturation(work, args.seed)
    shares = [k["share"] for m in models.values() for k in m["kinds"].values()]
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "onnxruntime": onnxruntime.__version__,
                "trials": args.trials,
                "seed": args.seed,
                "models": models,
                "int8_saturation": saturation,
                "target_met": all(s >= 0.95 for s in shares) and saturation["right"],
                "wall_s": round(time.perf_counter() - t0, 1),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
