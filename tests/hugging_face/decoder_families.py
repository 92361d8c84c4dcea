"""Random models of transformers' decoder families, for DecoderFamiliesTest.

    python decoder_families.py make cases.json dir
        For each case {"name", "family", "keys", "dtype"}: a model of
        transformers' <family>ForCausalLM (Gemma3: the text model) with
        weights drawn normal(0, 0.3), norms and biases too; dir/<name>/hf
        (save_pretrained, its weights stored in "dtype"), and
        dir/<name>/reference.pt: ids [3, 16] and their logits (fp32, on the
        weights as stored), a prompt [8] and its greedy continuation by 8.
    python decoder_families.py check cases.json dir
        Loads each dir/<name>/run/hf (what basin exported), checks that
        every weight of dir/<name>/run/state_dict.pt is its own to the bit,
        and its logits on dir/<name>/trained.pt's ids against basin's, to 1e-5;
        and PEFT's model of dir/<name>/hf (in fp32) with basin's adapter
        dir/<name>/lora/adapter, against dir/<name>/adapted.pt's logits.
"""
import json
import os
import shutil
import sys

import torch
import transformers


def classes(family):
    config = getattr(transformers, family + ("TextConfig" if family == "Gemma3" else "Config"))
    return config, getattr(transformers, family + "ForCausalLM")


mode, cases, root = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
for case in cases:
    out = os.path.join(root, case["name"])
    config_class, model_class = classes(case["family"])
    if mode == "make":
        torch.manual_seed(0)
        config = config_class(bos_token_id=None, eos_token_id=None, pad_token_id=None, **case["keys"])
        config._attn_implementation = "eager"
        model = model_class(config).eval()
        dtype = getattr(torch, case.get("dtype", "float32"))
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.normal_(0, 0.3).to(dtype).float())  # the stored values, computed in fp32
        ids = torch.randint(0, config.vocab_size, (3, 16))
        with torch.no_grad():
            logits = model(ids).logits
            prompt = ids[0, :8]
            greedy = model.generate(prompt.unsqueeze(0), max_new_tokens=8, min_new_tokens=8, do_sample=False)[0]
        shutil.rmtree(os.path.join(out, "hf"), ignore_errors=True)
        model.to(dtype).save_pretrained(os.path.join(out, "hf"))
        torch.save({"ids": ids, "logits": logits, "prompt": prompt, "greedy": greedy}, os.path.join(out, "reference.pt"))
        print("python:", case["name"], "greedy", greedy.tolist())
    else:
        import peft

        model = model_class.from_pretrained(os.path.join(out, "run", "hf"), dtype=torch.float32).eval()
        # Every weight basin trained (run/state_dict.pt, basin's names) is the export's, to the bit.
        loaded = model.state_dict()
        for name, weight in torch.load(os.path.join(out, "run", "state_dict.pt")).items():
            stored = name if name.startswith("lm_head.") else "model." + name
            assert torch.equal(loaded[stored], weight), (case["name"], stored)
        base = model_class.from_pretrained(os.path.join(out, "hf"), dtype=torch.float32)
        adapted = peft.PeftModel.from_pretrained(base, os.path.join(out, "lora", "adapter")).eval()
        for name, checked, saved in (("exported", model, "trained.pt"), ("peft", adapted, "adapted.pt")):
            basin = torch.load(os.path.join(out, saved))
            with torch.no_grad():
                difference = (checked(basin["ids"]).logits - basin["logits"]).abs().max().item()
            print("python:", case["name"], name, "largest difference from basin", difference)
            assert difference < 1e-5, (case["name"], name, difference)
