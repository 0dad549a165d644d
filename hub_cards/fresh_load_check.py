"""Load a folder about to be published in a process where as2hub cannot be imported; compare its outputs to the run's.

Run by ``as2hub.hub_cards.push`` before any upload, as ``python fresh_load_check.py SPEC.json`` (without the
working directory or this folder on ``sys.path``, and with an import hook that refuses ``as2hub``). This file
imports only the standard library, torch, transformers (and peft for a LoRA adapter), exactly what a user of the
published repository has. For each component of the spec (the model at the root, a LoRA adapter, a ``discriminator/``
subfolder, ...) it:

1. loads the config, and resolves every ``auto_map`` entry (and ``custom_pipelines`` implementation) to a class of
   the folder's own code (remote code);
2. loads the model with the component's Auto class (``trust_remote_code`` when the folder ships code), and reports any
   missing, unexpected or mismatched weight (a LoRA adapter is loaded onto its named base model with PEFT);
3. loads the tokenizer, tokenizes the reference inputs, runs the model and compares every floating-point output with
   the reference saved by the run (same shape; sampled values, mean and mean absolute value within tolerance).

It prints ``REPORT`` followed by a JSON list ``[{"component", "problems", "max_abs_diff"}]``; no problem means the
folder reproduces the trained model.
"""

import importlib.abc
import json
import sys
import traceback


class _BlockAs2hub(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "as2hub":
            raise ModuleNotFoundError(f"as2hub is blocked in this process (a published model must not need it): {name}")


SAMPLES = 256


def summarise_outputs(outputs) -> dict:
    """Floating-point tensors of a model output -> {name: {shape, index, values, mean, abs_mean}} (JSON-ready).

    ``values`` are the entries at ``SAMPLES`` evenly spaced flat positions, so full-vocabulary logits stay small.
    """
    import torch

    summary = {}
    items = outputs.items() if hasattr(outputs, "items") else enumerate(outputs)
    for name, tensor in items:
        if not torch.is_tensor(tensor) or not tensor.is_floating_point():
            continue
        flat = tensor.detach().float().cpu().reshape(-1)
        # Integer arithmetic: a float32 linspace rounds its last point past the end above 2**24 entries (the MLM
        # logits of a joint BERT input are 2 x 384 x 30,522).
        count = min(SAMPLES, flat.numel())
        index = torch.arange(count, dtype=torch.long) * (flat.numel() - 1) // max(count - 1, 1)
        summary[str(name)] = {
            "shape": list(tensor.shape),
            "index": index.tolist(),
            "values": flat[index].tolist(),
            "mean": flat.double().mean().item(),
            "abs_mean": flat.double().abs().mean().item(),
        }
    return summary


def tokenize(tokenizer, inputs: dict):
    """The model inputs of a reference: ``{"text", "text_pair", "max_length"}`` through the tokenizer, or ready
    ``{"tensors": {name: nested list}}`` for families whose forward takes more than the tokenizer gives."""
    if "tensors" in inputs:
        import torch

        return {name: torch.tensor(values) for name, values in inputs["tensors"].items()}
    return tokenizer(
        inputs["text"],
        inputs.get("text_pair"),
        padding=True,
        truncation=True,
        max_length=inputs.get("max_length", 64),
        return_tensors="pt",
    )


def compare(summary: dict, reference: dict, atol: float, rtol: float) -> tuple[list[str], float]:
    """Problems (empty when the outputs match) and the largest absolute difference seen."""
    problems, worst = [], 0.0
    for name, expected in reference.items():
        got = summary.get(name)
        if got is None:
            problems.append(f"output {name!r} is missing (got {sorted(summary)})")
            continue
        if got["shape"] != expected["shape"]:
            problems.append(f"output {name!r} has shape {got['shape']}, the run saved {expected['shape']}")
            continue
        pairs = list(zip(got["values"], expected["values"])) + [
            (got["mean"], expected["mean"]),
            (got["abs_mean"], expected["abs_mean"]),
        ]
        for value, want in pairs:
            difference = abs(value - want)
            worst = max(worst, difference)
            if difference > atol + rtol * abs(want):
                problems.append(
                    f"output {name!r} differs from the run's: {value:.6g} vs {want:.6g} (tolerance {atol:g} + "
                    f"{rtol:g}·|value|)"
                )
                break
    return problems, worst


def check_component(component: dict) -> tuple[list[str], float]:
    import torch
    import transformers
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    folder = component["path"]
    remote = component["trust_remote_code"]
    auto_name = component["auto_class"]
    problems = []
    config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=remote)
    auto_map = getattr(config, "auto_map", None) or {}
    if remote:
        if auto_name not in auto_map:
            problems.append(f"config.json auto_map has no {auto_name} entry (it lists {sorted(auto_map)})")
        references = dict(auto_map)
        for task, spec in (getattr(config, "custom_pipelines", None) or {}).items():
            references[f"custom_pipelines[{task}]"] = spec["impl"]
        for name, reference in references.items():
            cls = get_class_from_dynamic_module(reference, folder)
            if cls.__module__.startswith("as2hub"):
                problems.append(f"{name} resolved to {cls.__module__}, not to the folder's own code")
    overrides = component.get("config_overrides") or {}
    if component["kind"] == "adapter":
        from peft import PeftModel

        if remote:
            model_class = get_class_from_dynamic_module(auto_map[auto_name], folder)
        else:
            model_class = getattr(transformers, auto_name)
        base = model_class.from_pretrained(component["base_model"], config=config, ignore_mismatched_sizes=True)
        model = PeftModel.from_pretrained(base, folder)
    else:
        auto = getattr(transformers, auto_name)
        model, info = auto.from_pretrained(folder, trust_remote_code=remote, output_loading_info=True, **overrides)
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            if info.get(key):
                problems.append(f"loading {folder} reports {key.replace('_', ' ')}: {sorted(info[key])[:8]}")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=remote)
    reference = component["reference"]
    inputs = tokenize(tokenizer, reference["inputs"])
    with torch.no_grad():
        outputs = model.eval()(**inputs)
    found, worst = compare(summarise_outputs(outputs), reference["outputs"], reference["atol"], reference["rtol"])
    return problems + found, worst


def main(spec_path: str) -> None:
    sys.meta_path.insert(0, _BlockAs2hub())
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    report = []
    for component in spec["components"]:
        try:
            problems, worst = check_component(component)
        except Exception as error:  # report, do not crash: the caller turns this into a clear refusal
            lines = traceback.format_exception(type(error), error, error.__traceback__)
            problems, worst = [f"does not load: {type(error).__name__}: {error}\n{''.join(lines[-6:])}"], None
        report.append({"component": component["name"], "problems": problems, "max_abs_diff": worst})
    print("REPORT" + json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
