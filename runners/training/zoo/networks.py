"""The zoo's models, registered in ``MODELS`` at import.

Models that need only torch: ``mlp``, ``resnet_small`` (CIFAR-style ResNet with BasicBlocks and
BatchNorm for 32x32 images) and ``gpt_small`` (GPT-style decoder with pre-LN blocks and causal
self-attention). ``resnet50`` and ``vgg16`` need torchvision, ``bert-base`` and ``gpt2``
transformers (randomly initialised from their standard configurations; nothing is downloaded);
without the package they raise :class:`~runners._extras.MissingExtraError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from costmodels.errors import CommscopeError
from runners._extras import MissingExtraError, require

from .registry import MODELS, Batch, ModelEntry, classification_loss

torch = require("torch", "the model zoo")
nn = torch.nn
F = torch.nn.functional


def _needs(package: str, name: str) -> Any:
    try:
        return __import__(package)
    except ImportError as exc:
        raise MissingExtraError(f"model {name} needs the package {package}, which is not installed; "
                                f"install it with: pip install {package}") from exc


# ---------------------------------------------------------------------------------------- mlp
class MLP(nn.Module):
    """Linear + ReLU layers of the given widths, then a linear classifier."""

    def __init__(self, in_features: int, widths: tuple[int, ...], classes: int) -> None:
        super().__init__()
        layers: list[Any] = []
        for w in widths:
            layers += [nn.Linear(in_features, w), nn.ReLU()]
            in_features = w
        layers.append(nn.Linear(in_features, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Any) -> Any:
        return self.net(x)


def _mlp_batch(n: int, gen: Any, o: dict[str, Any]) -> Batch:
    return torch.randn(n, o["in_features"], generator=gen), torch.randint(0, o["classes"], (n,), generator=gen)


# ------------------------------------------------------------------------------- resnet_small
class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm, and a 1x1 convolution + BatchNorm shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNetSmall(nn.Module):
    """CIFAR-style ResNet: a 3x3 stem, stages of BasicBlocks at widths w, 2w, 4w, ... (stride 2 from the
    second stage on), global average pooling and a linear classifier. blocks=(3, 3, 3) is ResNet-20."""

    def __init__(self, width: int, blocks: tuple[int, ...], classes: int, channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        cin, stages = width, []
        for i, n in enumerate(blocks):
            cout = width * 2**i
            stage = [BasicBlock(cin, cout, 1 if i == 0 else 2)] + [BasicBlock(cout, cout, 1) for _ in range(n - 1)]
            stages.append(nn.Sequential(*stage))
            cin = cout
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: Any) -> Any:
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _image_batch(n: int, gen: Any, o: dict[str, Any]) -> Batch:
    size = o.get("image_size", 32)
    return (torch.randn(n, 3, size, size, generator=gen), torch.randint(0, o["classes"], (n,), generator=gen))


# ---------------------------------------------------------------------------------- gpt_small
class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise CommscopeError(f"gpt_small: dim {dim} must be a multiple of heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Any) -> Any:
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class DecoderBlock(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x)) with a GELU MLP of ``mlp_ratio`` x width."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTSmall(nn.Module):
    """Token and position embeddings, ``depth`` pre-LN decoder blocks, a final LayerNorm and an (untied) LM head."""

    def __init__(self, vocab: int, seq: int, dim: int, depth: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.seq = seq
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq, dim)
        self.blocks = nn.Sequential(*(DecoderBlock(dim, heads, mlp_ratio) for _ in range(depth)))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: Any) -> Any:
        t = idx.shape[1]
        if t > self.seq:
            raise CommscopeError(f"gpt_small: sequence of {t} tokens is longer than seq={self.seq}")
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln_f(self.blocks(x)))


def _token_batch(n: int, gen: Any, o: dict[str, Any]) -> Batch:
    tokens = torch.randint(0, o["vocab"], (n, o["seq"] + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


# ------------------------------------------------------------------- torchvision / transformers
def _torchvision(name: str) -> Callable[..., Any]:
    def build(classes: int, image_size: int) -> Any:
        tv = _needs("torchvision", name)
        import torchvision.models  # noqa: F401  (the subpackage)

        return getattr(tv.models, name)(weights=None, num_classes=classes)

    return build


def _bert(name: str) -> Callable[..., Any]:
    def build(seq: int, classes: int) -> Any:
        _needs("transformers", name)
        from transformers import BertConfig, BertForSequenceClassification

        cfg = BertConfig(num_labels=classes, max_position_embeddings=max(512, seq))
        return BertForSequenceClassification(cfg)

    return build


def _gpt2(name: str) -> Callable[..., Any]:
    def build(seq: int) -> Any:
        _needs("transformers", name)
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2LMHeadModel(GPT2Config(n_positions=max(1024, seq), use_cache=False))

    return build


def _bert_batch(n: int, gen: Any, o: dict[str, Any]) -> Batch:
    return torch.randint(0, 30522, (n, o["seq"]), generator=gen), torch.randint(0, o["classes"], (n,), generator=gen)


def _gpt2_batch(n: int, gen: Any, o: dict[str, Any]) -> Batch:
    return _token_batch(n, gen, {"vocab": 50257, "seq": o["seq"]})


for _entry in (
    ModelEntry("mlp", "multi-layer perceptron: Linear+ReLU per width, then a linear classifier",
               lambda in_features, widths, classes: MLP(in_features, widths, classes), _mlp_batch,
               classification_loss, {"in_features": 32, "widths": (256, 256), "classes": 10},
               dataset="gaussian_mixture"),
    ModelEntry("resnet_small", "CIFAR-style ResNet for 3x32x32 images: BasicBlocks with BatchNorm, widths w, 2w, 4w",
               lambda width, blocks, classes: ResNetSmall(width, blocks, classes), _image_batch, classification_loss,
               {"width": 16, "blocks": (2, 2, 2), "classes": 10}, dataset="gratings32"),
    ModelEntry("gpt_small", "GPT-style decoder: embeddings, pre-LN blocks with causal self-attention and MLP, LM head",
               lambda vocab, seq, dim, depth, heads, mlp_ratio: GPTSmall(vocab, seq, dim, depth, heads, mlp_ratio),
               _token_batch, classification_loss,
               {"vocab": 256, "seq": 64, "dim": 128, "depth": 2, "heads": 4, "mlp_ratio": 4}, dataset="markov_text"),
    ModelEntry("gpt_wide", "GPT-style decoder with a large vocabulary: gpt_small's layers with an 8192-token embedding "
               "and LM head of width 256 (4.2M of its 5.8M parameters), the communication-heavy transformer of the "
               "validation suites",
               lambda vocab, seq, dim, depth, heads, mlp_ratio: GPTSmall(vocab, seq, dim, depth, heads, mlp_ratio),
               _token_batch, classification_loss,
               {"vocab": 8192, "seq": 32, "dim": 256, "depth": 2, "heads": 4, "mlp_ratio": 4}, dataset="markov_text"),
    ModelEntry("resnet50", "torchvision ResNet-50 (v1.5), random weights", _torchvision("resnet50"), _image_batch,
               classification_loss, {"classes": 1000, "image_size": 224}, requires=("torchvision",)),
    ModelEntry("vgg16", "torchvision VGG-16 (no batch norm), random weights", _torchvision("vgg16"), _image_batch,
               classification_loss, {"classes": 1000, "image_size": 224}, requires=("torchvision",)),
    ModelEntry("bert-base", "transformers BertForSequenceClassification, bert-base-uncased configuration, random "
               "weights", _bert("bert-base"), _bert_batch, classification_loss, {"seq": 128, "classes": 2},
               requires=("transformers",)),
    ModelEntry("gpt2", "transformers GPT2LMHeadModel, gpt2 configuration (LM head tied to wte), random weights",
               _gpt2("gpt2"), _gpt2_batch, classification_loss, {"seq": 128}, requires=("transformers",)),
):
    MODELS.register(_entry)

