"""Parameters that every hot caller fills with host data: CPU tensors built in the call, the branch of a
conditional a graph can take, and a caller's own host parameter passed on (SGLang 0.5.23 Jet-Nemotron)."""

from __future__ import annotations

import textwrap

# sglang/srt/models/jet_nemotron.py, cut down: the block passes the extend lengths, or on decode batches (where
# `extend_seq_lens` is None) a CPU tensor of ones; the convolution hands them on to helpers that slice by them
JET = """
    import torch
    from torch import nn


    class DynamicShortConvolution(nn.Module):
        def forward(self, x: torch.Tensor, *, seq_lens: torch.Tensor) -> torch.Tensor:
            seqs = self._continuous_to_seqs(x, seq_lens=seq_lens)
            return self._batch_to_continuous(torch.stack(seqs), seq_lens=seq_lens)

        def _batch_to_continuous(self, x: torch.Tensor, *, seq_lens: torch.Tensor) -> torch.Tensor:
            return torch.cat([x[i, -seq_lens[i] :] for i in range(seq_lens.size(0))])

        def _continuous_to_seqs(self, x: torch.Tensor, *, seq_lens: torch.Tensor) -> list[torch.Tensor]:
            return [x[(seq_lens[:i].sum()) : (seq_lens[: i + 1].sum())] for i in range(seq_lens.size(0))]


    class JetBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.dynamic_conv1d = DynamicShortConvolution()

        def forward(self, hidden_states: torch.Tensor, forward_batch) -> torch.Tensor:
            return self.dynamic_conv1d(
                hidden_states,
                seq_lens=(
                    forward_batch.extend_seq_lens
                    if forward_batch.extend_seq_lens is not None
                    else torch.ones((forward_batch.batch_size,), dtype=torch.long)
                ),
            )
    """
SETTINGS = {"hot-paths": ["pkg.jet:JetBlock.forward"], "eager-if": ["extend_seq_lens"]}


def _lint(lint_project, source: str = JET, settings: dict = SETTINGS):
    return lint_project({"pkg/__init__.py": "", "pkg/jet.py": textwrap.dedent(source)}, settings)


def _slices(result) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in result.findings]


def test_decode_lengths_built_on_the_cpu_reach_the_helpers_as_host_data(lint_project):
    """Decode graphs take the `else`: a CPU tensor, whose slice bounds are read without waiting for the GPU."""
    result = _lint(lint_project)
    assert result.findings == []
    assert "pkg.jet:DynamicShortConvolution._continuous_to_seqs" in result.hot_chains


def test_without_the_eager_only_fact_the_device_lengths_may_be_captured(lint_project):
    """Firing twin: with no word that `extend_seq_lens` is None while capturing, either branch can be taken,
    and the extend lengths are a device tensor: both helpers slice by values read from it."""
    result = _lint(lint_project, settings={"hot-paths": SETTINGS["hot-paths"]})
    assert _slices(result) == [("GR203", 12), ("GR203", 15)]


def test_lengths_built_on_the_device_are_device_data(lint_project):
    """Firing twin: the fallback built with `device=` is a device tensor the graph reads on the host."""
    source = JET.replace("dtype=torch.long)", "dtype=torch.long, device=hidden_states.device)")
    assert _slices(_lint(lint_project, source)) == [("GR203", 12), ("GR203", 15)]


def test_a_factory_under_a_default_device_builds_there(lint_project):
    """Firing twin: inside `with torch.device(d):` a factory without `device=` builds on `d`."""
    source = JET.replace("            return self.dynamic_conv1d(\n",
                         "            with torch.device(hidden_states.device):\n"
                         "                return self.dynamic_conv1d(\n")
    source = source.replace("\n                hidden_states,\n", "\n                    hidden_states,\n")
    assert _slices(_lint(lint_project, source)) == [("GR203", 12), ("GR203", 15)]


def test_one_device_caller_keeps_a_passed_on_parameter_a_device_tensor(lint_project):
    """Firing twin: a parameter passed on is host data only where every hot call of the helper passes host data;
    a second caller handing its device lengths to the same helper makes the helper's slices syncs."""
    source = JET + textwrap.indent(textwrap.dedent("""
        class Packer(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = DynamicShortConvolution()

            def forward(self, x: torch.Tensor, seq_lens: torch.Tensor) -> list[torch.Tensor]:
                return self.conv._continuous_to_seqs(x, seq_lens=seq_lens)
        """), "    ")
    settings = {**SETTINGS, "hot-paths": [*SETTINGS["hot-paths"], "pkg.jet:Packer.forward"]}
    assert _slices(_lint(lint_project, source, settings)) == [("GR203", 15)]


# sglang/srt/model_loader/loader.py and layers/quantization/bitsandbytes.py, cut down: the loader attaches each
# parameter's shard offsets as a CPU tensor; the linear method hands them to a helper annotated `torch.Tensor`
LOADER = """
    import numpy as np
    import torch

    from pkg.utils import set_weight_attrs


    def attach_offsets(params, quant_states):
        for name, param in params.items():
            num_elements = [state.numel() for state in quant_states[name]]
            offsets = np.concatenate(([0], np.cumsum(num_elements)))
            offsets = torch.tensor(offsets).cpu()
            set_weight_attrs(param, {"bnb_shard_offsets": offsets})
    """
UTILS = """
    def set_weight_attrs(weight, weight_attrs):
        for key, value in weight_attrs.items():
            setattr(weight, key, value)
    """
BNB = """
    import torch


    class BitsAndBytesLinearMethod:
        def apply(self, layer, x: torch.Tensor) -> torch.Tensor:
            qweight = layer.weight
            offsets = qweight.bnb_shard_offsets
            out = torch.empty(x.shape[0], 64, device=x.device)
            apply_bnb_4bit(x, qweight, offsets, out)
            return out


    def apply_bnb_4bit(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor, out: torch.Tensor) -> None:
        for i in range(len(weight.bnb_quant_state)):
            out[:, i * 32 : (i + 1) * 32] = x @ weight[offsets[i] : offsets[i + 1]].t()
    """


def _lint_bnb(lint_project, loader: str = LOADER):
    files = {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/loader.py": loader, "pkg/bnb.py": BNB}
    return lint_project({path: textwrap.dedent(text) for path, text in files.items()},
                        {"hot-paths": ["pkg.bnb:*.apply"]})


def test_parameter_attributes_the_loader_attaches_on_the_cpu_are_host_data(lint_project):
    """The offsets are a CPU tensor wherever the loader attaches them: slicing by them reads no device value."""
    assert _lint_bnb(lint_project).findings == []


def test_parameter_attributes_attached_on_the_device_are_device_data(lint_project):
    """Firing twin: offsets moved to the parameter's device are read on the host by every slice."""
    loader = LOADER.replace("torch.tensor(offsets).cpu()", "torch.tensor(offsets).to(param.device)")
    assert _slices(_lint_bnb(lint_project, loader)) == [("GR203", 16)]


def test_one_device_value_for_the_attribute_anywhere_keeps_it_device_data(lint_project):
    """Firing twin: another loader path attaching the same attribute as a device tensor: no longer known host."""
    loader = LOADER + textwrap.indent(textwrap.dedent("""

        def attach_offsets_on_device(param, offsets):
            set_weight_attrs(param, {"bnb_shard_offsets": offsets.cuda()})
        """), "    ")
    assert _slices(_lint_bnb(lint_project, loader)) == [("GR203", 16)]
