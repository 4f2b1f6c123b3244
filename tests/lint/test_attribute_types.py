"""The hot-path walk follows module attributes built the ways engines build them.

Each case is a decoder written in one engine's idiom, with `Top.forward` as the only root: the
layer (`Hot.forward`) must be reached through the attribute, and the tower (`Tower.forward`),
built in the same `__init__` but called only from a prefill helper, must not.
"""

from __future__ import annotations

import textwrap

import pytest

from graphready.cli import main

PRELUDE = '''
from itertools import islice
from torch import nn

class Hot(nn.Module):
    def forward(self, x):
        return x

class Other(nn.Module):
    def forward(self, x):
        return x

class Tower(nn.Module):
    def forward(self, x):
        return x

def make_layers(n, layer_fn, prefix=""):
    return [layer_fn(prefix=str(i)) for i in range(n)]
'''

CASES = {
    "sglang factory, list first in the tuple": '''
class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower = Tower()
        self.layers, self.start, self.end = make_layers(2, lambda idx, prefix: Hot())
    def get_image_feature(self, x):
        return self.tower(x)
    def forward(self, x):
        for i in range(self.start, self.end):
            x = self.layers[i](x)
        return x
''',
    "vLLM factory, list last, islice loop": '''
class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower = Tower()
        self.start, self.end, self.layers = make_layers(2, lambda prefix: Hot())
    def embed_multimodal(self, x):
        return self.tower(x)
    def forward(self, x):
        for layer in islice(self.layers, self.start, self.end):
            x = layer(x)
        return x
''',
    "local builder function picking from a {kind: class} table": '''
LAYER_TYPES = {"attention": Hot, "mamba": Other}

class Top(nn.Module):
    def __init__(self, pattern, decoder_layer_types=None):
        super().__init__()
        self.tower = Tower()
        layer_types = decoder_layer_types or LAYER_TYPES
        def get_layer(prefix):
            layer_class = layer_types[pattern[int(prefix)]]
            return layer_class(prefix=prefix)
        self.start, self.end, self.layers = make_layers(2, get_layer)
    def forward(self, x):
        return self.layers[0](x)
''',
    "subclass hands its layer class to the base __init__": '''
class Base(nn.Module):
    def __init__(self, decoder_layer_type=Other):
        super().__init__()
        self.layers = make_layers(2, lambda prefix: decoder_layer_type())
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

class Model(Base):
    def __init__(self):
        super().__init__(decoder_layer_type=Hot)

class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Model()
        self.tower = Tower()
    def forward(self, x):
        return self.model(x)
''',
    "attention class held in a class attribute": '''
class Top(nn.Module):
    attention_cls = Hot
    block_cls: type[nn.Module] = Tower
    def __init__(self):
        super().__init__()
        self.attn = self.attention_cls()
        self.tower = self.block_cls()
    def forward(self, x):
        return self.attn(x)
''',
    "builder method annotated with the class it makes": '''
class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = self._build_attn()
        self.tower = Tower()
    def _build_attn(self) -> Hot:
        return Hot()
    def forward(self, x):
        return self.attn(x)
''',
    "layers appended one by one": '''
class Top(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList()
        self.towers = nn.ModuleList()
        for _ in range(2):
            layer = Hot()
            self.layers.append(layer)
            self.towers.append(Tower())
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
''',
    "sparse or dense MLP chosen per layer": '''
class Top(nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.mlp = Other() if sparse else Hot()
        attn_cls = Hot if sparse else Other
        self.attn = attn_cls()
        self.tower = Tower()
    def forward(self, x):
        return self.attn(self.mlp(x))
''',
}


@pytest.mark.parametrize("idiom", CASES)
def test_layers_are_reached_and_towers_are_not(tmp_path, capsys, idiom):
    (tmp_path / "pyproject.toml").write_text('[tool.graphready]\nhot-paths = ["model:Top.forward"]\n')
    (tmp_path / "model.py").write_text(PRELUDE + textwrap.dedent(CASES[idiom]))
    assert main(["lint", "--list-hot", "--no-cache", str(tmp_path)]) == 0
    hot = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert "model:Hot.forward" in hot
    assert "model:Tower.forward" not in hot


def test_module_level_alias_picks_the_cuda_class(tmp_path, capsys):
    """`DecoderLayer = CudaDecoderLayer if _is_cuda else PlatformDecoderLayer`: the CUDA class is captured."""
    (tmp_path / "pyproject.toml").write_text('[tool.graphready]\nhot-paths = ["model:Top.forward"]\n')
    (tmp_path / "model.py").write_text(PRELUDE + textwrap.dedent('''
        _is_cuda = True
        DecoderLayer = Hot if _is_cuda else Tower

        class Top(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = make_layers(2, lambda prefix: DecoderLayer())
            def forward(self, x):
                return self.layers[0](x)
    '''))
    assert main(["lint", "--list-hot", "--no-cache", str(tmp_path)]) == 0
    hot = capsys.readouterr().out
    assert "model:Hot.forward" in hot and "model:Tower.forward" not in hot
