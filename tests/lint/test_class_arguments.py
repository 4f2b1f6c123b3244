"""Layer classes handed to a model's constructor (`decoder_layer_type=...`, by keyword or position): the
instance builds its layers from the class given, so the walk follows it (SGLang 0.5.23 Jet-Nemotron)."""

from __future__ import annotations

import textwrap

# sglang/srt/models/qwen2.py: Qwen2Model builds its layers from a class parameter with a default
BASE = """
    import torch
    from torch import nn


    class Qwen2DecoderLayer(nn.Module):
        def __init__(self, config, layer_id: int = 0, prefix: str = ""):
            super().__init__()
            self.proj = nn.Linear(config.hidden_size, config.hidden_size)

        def forward(self, positions, hidden_states, forward_batch):
            return self.proj(hidden_states)


    def make_pp_layers(n, layer_fn, prefix=""):
        return nn.ModuleList([layer_fn(i, prefix) for i in range(n)]), 0, n


    class Qwen2Model(nn.Module):
        def __init__(self, config, quant_config=None, prefix: str = "",
                     decoder_layer_type: type[nn.Module] = Qwen2DecoderLayer):
            super().__init__()
            self.layers, self.start_layer, self.end_layer = make_pp_layers(
                config.num_hidden_layers,
                lambda idx, prefix: decoder_layer_type(config=config, layer_id=idx, prefix=prefix),
            )

        def forward(self, input_ids, positions, forward_batch):
            hidden_states = input_ids
            for i in range(self.start_layer, self.end_layer):
                hidden_states = self.layers[i](positions, hidden_states, forward_batch)
            return hidden_states
    """

# sglang/srt/models/jet_nemotron.py, cut down: the subclass keeps Qwen2Model.__init__, the causal LM hands
# it the real decoder layer, whose short convolution slices with bounds read from a device tensor
JET = """
    import torch
    from torch import nn

    from pkg.qwen2 import Qwen2Model


    class DynamicShortConvolution(nn.Module):
        def forward(self, x: torch.Tensor, seq_lens: torch.Tensor) -> list[torch.Tensor]:
            return [x[(seq_lens[:i].sum()) : (seq_lens[: i + 1].sum())] for i in range(seq_lens.size(0))]


    class JetNemotronDecoderLayer(nn.Module):
        def __init__(self, config, layer_id: int = 0, prefix: str = ""):
            super().__init__()
            self.conv = DynamicShortConvolution()

        def forward(self, positions, hidden_states, forward_batch):
            return torch.cat(self.conv(hidden_states, forward_batch.seq_lens))


    class JetNemotronModel(Qwen2Model):
        pass


    class JetNemotronForCausalLM(nn.Module):
        def __init__(self, config, quant_config=None, prefix: str = ""):
            super().__init__()
            self.model = {build}

        def forward(self, input_ids, positions, forward_batch):
            return self.model(input_ids, positions, forward_batch)
    """

SETTINGS = {"hot-paths": ["pkg.*:*ForCausalLM.forward"]}


def _lint(lint_project, build: str):
    files = {"pkg/qwen2.py": textwrap.dedent(BASE), "pkg/jet.py": textwrap.dedent(JET).replace("{build}", build)}
    return lint_project(files, SETTINGS)


def test_a_layer_class_given_by_keyword_is_the_one_the_walk_follows(lint_project):
    result = _lint(lint_project,
                   'JetNemotronModel(config, quant_config, prefix, decoder_layer_type=JetNemotronDecoderLayer)')
    assert [(f.rule, f.path, f.line) for f in result.findings] == [("GR203", "pkg/jet.py", 10)]
    assert "pkg.jet:DynamicShortConvolution.forward" in result.hot_chains


def test_a_layer_class_given_by_position_maps_to_its_parameter(lint_project):
    result = _lint(lint_project, 'JetNemotronModel(config, quant_config, prefix, JetNemotronDecoderLayer)')
    assert [(f.rule, f.line) for f in result.findings] == [("GR203", 10)]


def test_the_default_layer_class_stays_when_none_is_given(lint_project):
    """Clean twin: built with the default, the Jet layer is never constructed by this model and stays cold."""
    result = _lint(lint_project, 'JetNemotronModel(config, quant_config, prefix)')
    assert result.findings == []
    assert "pkg.jet:DynamicShortConvolution.forward" not in result.hot_chains
    assert "pkg.qwen2:Qwen2DecoderLayer.forward" in result.hot_chains


def test_a_class_list_comprehension_of_the_parameter_is_followed_too(lint_project):
    """`nn.ModuleList([decoder_layer_type(...) for i in ...])` instead of a factory."""
    files = {"pkg/qwen2.py": textwrap.dedent(BASE).replace(
        """make_pp_layers(
                config.num_hidden_layers,
                lambda idx, prefix: decoder_layer_type(config=config, layer_id=idx, prefix=prefix),
            )""", """(nn.ModuleList(
                [decoder_layer_type(config=config, layer_id=i) for i in range(config.num_hidden_layers)]),
                0, config.num_hidden_layers)"""),
        "pkg/jet.py": textwrap.dedent(JET).replace(
            "{build}", "JetNemotronModel(config, decoder_layer_type=JetNemotronDecoderLayer)")}
    assert [(f.rule, f.line) for f in lint_project(files, SETTINGS).findings] == [("GR203", 10)]
