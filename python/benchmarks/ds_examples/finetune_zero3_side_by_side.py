"""finetune_zero3_side_by_side.py - DeepSpeedExamples' training/DeepSpeed-SuperOffload/finetune_zero3.py under
DeepSpeed, under zoffload with its import lines changed, and under a plain-torch reference, in one run.

    DIR/bin/python python/benchmarks/ds_examples/finetune_zero3_side_by_side.py \\
        --examples PATH/DeepSpeedExamples [--work DIR] [--kind llama|moe] [--rounds 3] [--steps 20]

DIR is the torch 2 venv of scripts/torch2-env.sh (torch, DeepSpeed, transformers, datasets; the script also
imports wandb: pip install wandb). The script is run as the example's own finetune_llama-8b_1gpu.sh runs it in its
"zerooffload" mode (the config that script writes: ZeRO stage 3, bf16, offload_optimizer cpu with pinned memory;
DeepSpeedCPUAdam as the client optimizer; activation checkpointing), with local stand-ins for the hub model and
dataset (finetune_inputs.py: a small Llama, or with --kind moe a Qwen3-MoE run with the script's own
--leaf_module Qwen3MoeSparseMoeBlock), --attn_implementation sdpa (flash-attn is CUDA-only) and
--max_length 256. The config leaves gradient_clipping out, as the example's does: DeepSpeed 0.19.8 then clips
the gradient norm at 1.0 (its default since deepspeedai/DeepSpeed#8068), zoffload and the reference do not clip;
--gradient-clipping X writes the key for all three. The copies:
  deepspeed  the script unchanged, `deepspeed --num_gpus 1` (DS_ACCELERATOR=cpu)
  zoffload   its import lines changed (printed as a diff), `zoffload --num_gpus 1`
  torch      its import lines pointed at torchref/ (bf16 model, fp32 master weights, torch's Adam)
Every round runs the three, in an order that rotates between rounds. Printed: the diff, each step's loss (the
script's own log line) per framework, the median ms a step after --warmup steps (the script's own "Time") per
round and the median over rounds, and each run's wall time. The last line is one JSON object of those figures.
"""
import argparse
import difflib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join("training", "DeepSpeed-SuperOffload", "finetune_zero3.py")
# rank 0's own handler's lines (every rank also logs through the root logger, as "INFO:finetune_zero3:Step ...")
STEP = re.compile(r" - finetune_zero3 - INFO - Step\s+(\d+) \| Loss: ([0-9.naif]+) \| Time:\s*(\d+)ms")


def ported(text, package):
    """@text with its `import deepspeed` / `from deepspeed[.X] import` lines pointed at @package; nothing else."""
    out = []
    for line in text.splitlines(keepends=True):
        if re.match(r"^\s*import deepspeed\s*$", line):
            line = line.replace("import deepspeed", "import %s as deepspeed" % package)
        elif re.match(r"^\s*from deepspeed[. ]", line):
            line = line.replace("from deepspeed", "from " + package, 1)
        out.append(line)
    return "".join(out)


def config(batch, clip=None):
    """The "zerooffload" config that the example's finetune_llama-8b_1gpu.sh writes, with its batch size; with
    @clip, "gradient_clipping": @clip added (the example leaves it out: 1.0 to DeepSpeed 0.19.8, 0 to zoffload)."""
    extra = {} if clip is None else {"gradient_clipping": clip}
    return {**extra, "train_batch_size": batch, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3, "overlap_comm": False, "reduce_bucket_size": 4e8,
                                  "sub_group_size": 4e8,
                                  "offload_optimizer": {"device": "cpu", "pin_memory": True}},
            "wall_clock_breakdown": True}


def run(name, cmd, env, log):
    t0 = time.time()
    with open(log, "w") as fh:
        rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    wall = time.time() - t0
    steps = {}
    with open(log, errors="replace") as fh:
        for m in STEP.finditer(fh.read()):
            steps[int(m.group(1))] = (float(m.group(2)), int(m.group(3)))
    if rc != 0 or not steps:
        sys.exit("%s failed (exit %d, %d step lines): see %s" % (name, rc, len(steps), log))
    return steps, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", required=True, help="a DeepSpeedExamples checkout")
    ap.add_argument("--work", help="a directory for the inputs, copies and logs (default: a new one under $TMPDIR)")
    ap.add_argument("--kind", choices=("llama", "moe"), default="llama")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=1,
                    help="ranks each launcher starts (default 1); above 1 the torch reference is left out")
    ap.add_argument("--gradient-clipping", type=float, default=None,
                    help="add gradient_clipping to the config (default: left out, as the example writes it)")
    a = ap.parse_args()
    bindir = os.path.dirname(sys.executable)
    if a.work:
        os.makedirs(a.work, exist_ok=True)
    else:
        a.work = tempfile.mkdtemp(prefix="finetune_zero3-")
        print("finetune_zero3_side_by_side: inputs, copies and logs in %s" % a.work)
    inputs = os.path.join(a.work, "inputs-%s-%dx%d" % (a.kind, a.layers, a.hidden))
    if not os.path.exists(os.path.join(inputs, "model", "config.json")):
        subprocess.check_call([sys.executable, os.path.join(HERE, "finetune_inputs.py"), inputs, str(a.layers),
                               str(a.hidden), a.kind])
    with open(os.path.join(a.examples, SCRIPT)) as fh:
        original = fh.read()
    copies = {"deepspeed": original, "zoffload": ported(original, "zoffload"), "torch": ported(original, "torchref")}
    for name, text in copies.items():
        with open(os.path.join(a.work, "%s_finetune_zero3.py" % name), "w") as fh:
            fh.write(text)
    sys.stdout.writelines(difflib.unified_diff(original.splitlines(keepends=True),
                                               copies["zoffload"].splitlines(keepends=True),
                                               "a/" + SCRIPT, "b/" + SCRIPT, n=0))
    cfg = os.path.join(a.work, "zerooffload.json")
    with open(cfg, "w") as fh:
        json.dump(config(a.batch, a.gradient_clipping), fh, indent=4)
    args = ["--deepspeed_config=" + cfg, "--model_name", os.path.join(inputs, "model"), "--num_train_epochs", "1",
            "--lr", "1e-5", "--batch_size", str(a.batch), "--weight_decay", "0.01",
            "--output_dir", os.path.join(a.work, "out"), "--seed", "42", "--max_length", "256",
            "--log_interval", "1", "--dataset_name", os.path.join(inputs, "data"), "--bench_steps", str(a.steps),
            "--warmup_steps", str(a.warmup), "--activation_checkpointing", "--attn_implementation", "sdpa"]
    if a.kind == "moe":
        args += ["--leaf_module", "Qwen3MoeSparseMoeBlock"]
    base = dict(os.environ, TOKENIZERS_PARALLELISM="false", WANDB_MODE="disabled")
    cmds = {
        "deepspeed": ([os.path.join(bindir, "deepspeed"), "--num_gpus", str(a.ranks), "--master_port", "29611"],
                      dict(base, DS_ACCELERATOR="cpu")),
        "zoffload": ([os.path.join(bindir, "zoffload"), "--num_gpus", str(a.ranks), "--master_port", "29612"], base),
        "torch": ([sys.executable], dict(base, PYTHONPATH=HERE + os.pathsep + base.get("PYTHONPATH", ""))),
    }
    if a.ranks > 1:  # the reference is one process; rank 0 logs the loss of its own part of the batch
        del cmds["torch"]
    names = list(cmds)
    results = {n: [] for n in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            prog, env = cmds[n]
            log = os.path.join(a.work, "%s-round%d.log" % (n, r + 1))
            steps, wall = run(n, prog + [os.path.join(a.work, "%s_finetune_zero3.py" % n)] + args, env, log)
            ms = statistics.median(t for s, (_, t) in steps.items() if s > a.warmup)
            results[n].append({"steps": steps, "wall_s": wall, "ms_per_step": ms})
            print("round %d %-9s median %5.0f ms a step after step %d, wall %.1f s" % (r + 1, n, ms, a.warmup, wall),
                  flush=True)
    print("\nstep  %s" % "  ".join("%-9s" % n for n in names))
    first = {n: results[n][0]["steps"] for n in names}
    for s in sorted(first[names[-1]]):
        print("%4d  %s" % (s, "  ".join("%-9.4f" % first[n][s][0] if s in first[n] else "%-9s" % "-" for n in names)))
    summary = {"kind": a.kind, "steps": a.steps, "rounds": a.rounds, "ranks": a.ranks,
               "gradient_clipping": a.gradient_clipping}
    for n in names:
        same = all(sorted((s, v[0]) for s, v in x["steps"].items()) ==
                   sorted((s, v[0]) for s, v in first[n].items()) for x in results[n])
        summary[n + "_ms_per_step"] = statistics.median(x["ms_per_step"] for x in results[n])
        summary[n + "_ms_per_step_rounds"] = [x["ms_per_step"] for x in results[n]]
        summary[n + "_wall_s"] = [round(x["wall_s"], 1) for x in results[n]]
        summary[n + "_losses_same_every_round"] = same
        summary[n + "_losses"] = [first[n][s][0] for s in sorted(first[n])]
        if n != "torch" and "torch" in first:
            d = [abs(first[n][s][0] - first["torch"][s][0]) for s in first["torch"] if s in first[n]]
            summary[n + "_max_abs_loss_diff_to_torch"] = round(max(d), 4)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
