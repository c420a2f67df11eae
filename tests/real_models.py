"""The models people bring, built small: Hugging Face ViT, BERT, GPT-2, Llama, ResNet and
MobileNet from tiny configs with random weights (nothing downloaded), `torch.nn` LSTM and GRU,
and two models with data-dependent control flow that `torch.export` cannot take (`ZOO`,
`CONTROL_FLOW`); more families, Qwen2, Mistral, T5, Whisper, Swin, CLIP and ConvNeXt
(`FAMILIES`); and small models around an op TVM's importer cannot translate (`UNSUPPORTED`:
`torch.fft.rfft`, `torch.searchsorted`, `torch.cummax`, `torch.histc`).

Shared by the real-model tests, tutorial 10, `benchmarks/real_models.py` and
`benchmarks/models_report.py` (`make models`):

    from real_models import ZOO
    model, args = ZOO["gpt2"].build()

Each `build()` seeds torch first, so two builds give the same weights and inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

SEQ = 8  # tokens per text input
VOCAB = 100
IMAGE = 32  # pixels per side of an image input


@dataclass(frozen=True)
class RealModel:
    """A model from a tiny config and an example input for it."""

    name: str
    make: Callable[[], torch.nn.Module]
    example: Callable[[], tuple[torch.Tensor, ...]]

    def build(self, seed: int = 0) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        """The model in eval mode and its example arguments, the same for the same seed."""
        torch.manual_seed(seed)
        model = self.make().eval()
        return model, self.example()


def tokens() -> tuple[torch.Tensor]:
    return (torch.randint(0, VOCAB, (1, SEQ)),)


def image() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, IMAGE, IMAGE),)


def sequence() -> tuple[torch.Tensor]:
    return (torch.randn(2, 5, 6),)  # batch, time, features


# -- Hugging Face transformers ---------------------------------------------------------------
TINY_TEXT = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2}
TINY_TEXT.update(num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)


def vit() -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    config = {
        k: v for k, v in TINY_TEXT.items() if k not in ("vocab_size", "max_position_embeddings")
    }
    return ViTForImageClassification(
        ViTConfig(**config, image_size=IMAGE, patch_size=8, num_labels=5)
    )


def bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(**TINY_TEXT))


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=VOCAB,
        n_positions=32,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,  # the default, 50256, is outside VOCAB
    )
    return GPT2LMHeadModel(config)


def llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**TINY_TEXT, num_key_value_heads=2)
    config.use_cache = False
    return LlamaForCausalLM(config)


def resnet() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=5
    )
    return ResNetForImageClassification(config)


def mobilenet() -> torch.nn.Module:
    from transformers import MobileNetV1Config, MobileNetV1ForImageClassification

    config = MobileNetV1Config(image_size=IMAGE, depth_multiplier=0.25, num_labels=5)
    model = MobileNetV1ForImageClassification(config)
    # transformers draws weights with std 0.02, which shrinks the logits through 27 convs to
    # 1e-33: any numbers would match. He's init (torch's own for the classifier) keeps them large.
    for conv in model.modules():
        if isinstance(conv, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(conv.weight)
    model.classifier.reset_parameters()
    return model


def qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**TINY_TEXT, num_key_value_heads=1, use_cache=False)
    return Qwen2ForCausalLM(config)


def mistral() -> torch.nn.Module:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(**TINY_TEXT, num_key_value_heads=1, sliding_window=4, use_cache=False)
    return MistralForCausalLM(config)


def t5_encoder() -> torch.nn.Module:
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, use_cache=False
    )
    return T5EncoderModel(config)


MEL_BINS, AUDIO_POSITIONS = 8, 16


def whisper_encoder() -> torch.nn.Module:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=2,
        encoder_ffn_dim=64,
        num_mel_bins=MEL_BINS,
        max_source_positions=AUDIO_POSITIONS,
        **dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id"), 0),
        decoder_start_token_id=0,
    )
    return WhisperEncoder(config)


def audio() -> tuple[torch.Tensor]:
    return (torch.randn(1, MEL_BINS, 2 * AUDIO_POSITIONS),)  # batch, mel bins, frames


def swin() -> torch.nn.Module:
    from transformers import SwinConfig, SwinForImageClassification

    config = SwinConfig(
        image_size=IMAGE,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 2],
        window_size=4,
        num_labels=5,
    )
    return SwinForImageClassification(config)


def clip_vision() -> torch.nn.Module:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = {k: v for k, v in TINY_TEXT.items() if k in ("hidden_size", "num_hidden_layers")}
    config.update(num_attention_heads=2, intermediate_size=64, image_size=IMAGE, patch_size=8)
    return CLIPVisionModel(CLIPVisionConfig(**config))


def clip_text() -> torch.nn.Module:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(**TINY_TEXT, eos_token_id=VOCAB - 1, bos_token_id=0, pad_token_id=0)
    return CLIPTextModel(config)


def convnext() -> torch.nn.Module:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(
        num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=5, image_size=IMAGE
    )
    return ConvNextForImageClassification(config)


# -- ops TVM's importer cannot translate (they come in as PyTorch calls) ----------------------
class Spectrum(torch.nn.Module):
    """A linear layer over a signal's magnitude spectrum: `torch.fft.rfft`, complex in between."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(torch.fft.rfft(x).abs())


class Buckets(torch.nn.Module):
    """An embedding of which bucket each value falls in: `torch.searchsorted`."""

    def __init__(self):
        super().__init__()
        self.register_buffer("edges", torch.linspace(-2, 2, 9))
        self.embed = torch.nn.Embedding(10, 4)

    def forward(self, x):
        return self.embed(torch.searchsorted(self.edges, x))


class RunningMax(torch.nn.Module):
    """The running maximum of a layer's outputs, and where it was reached: `torch.cummax`."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        values, indices = torch.cummax(self.fc(x), dim=1)
        return values * 2, indices


class Histogram(torch.nn.Module):
    """The share of values in each of five bins: `torch.histc`."""

    def forward(self, x):
        return torch.histc(x, bins=5, min=-2, max=2) / x.numel()


# -- torch.nn recurrent layers ---------------------------------------------------------------
class LastStep(torch.nn.Module):
    """A recurrent layer read at its last time step: `self.fc(out[:, -1])`."""

    def __init__(self, cell: type[torch.nn.Module]):
        super().__init__()
        self.rnn = cell(6, 12, batch_first=True)
        self.fc = torch.nn.Linear(12, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


# -- data-dependent control flow -------------------------------------------------------------
class SignBranch(torch.nn.Module):
    """Takes one branch or the other by the sign of a sum."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return y * 2
        return y - 1


class HalveUntilSmall(torch.nn.Module):
    """Loops as long as a norm says so."""

    def forward(self, x):
        while x.norm() > 1:
            x = x / 2
        return x


def by_name(*models: RealModel) -> dict[str, RealModel]:
    return {m.name: m for m in models}


ZOO = by_name(
    RealModel("vit", vit, image),
    RealModel("bert", bert, tokens),
    RealModel("gpt2", gpt2, tokens),
    RealModel("llama", llama, tokens),
    RealModel("resnet", resnet, image),
    RealModel("mobilenet", mobilenet, image),
    RealModel("lstm", lambda: LastStep(torch.nn.LSTM), sequence),
    RealModel("gru", lambda: LastStep(torch.nn.GRU), sequence),
)
FAMILIES = by_name(
    RealModel("qwen2", qwen2, tokens),
    RealModel("mistral", mistral, tokens),
    RealModel("t5_encoder", t5_encoder, tokens),
    RealModel("whisper_encoder", whisper_encoder, audio),
    RealModel("swin", swin, image),
    RealModel("clip_vision", clip_vision, image),
    RealModel("clip_text", clip_text, tokens),
    RealModel("convnext", convnext, image),
)

UNSUPPORTED = by_name(
    RealModel("spectrum", Spectrum, lambda: (torch.randn(2, 8),)),
    RealModel("buckets", Buckets, lambda: (torch.randn(2, 6),)),
    RealModel("running_max", RunningMax, lambda: (torch.randn(2, 8),)),
    RealModel("histogram", Histogram, lambda: (torch.randn(3, 8),)),
)
# The op of each that TVM 0.27's importer has no converter for
UNSUPPORTED_OPS = {
    "spectrum": "aten._fft_r2c.default",
    "buckets": "aten.searchsorted.Tensor",
    "running_max": "aten.cummax.default",
    "histogram": "aten.histc.default",
}

CONTROL_FLOW: dict[str, RealModel] = {
    m.name: m
    for m in (
        RealModel("sign_branch", SignBranch, lambda: (torch.randn(2, 6),)),
        RealModel("halve_until_small", HalveUntilSmall, lambda: (torch.randn(4) * 10,)),
    )
}


def flat(value) -> list[torch.Tensor]:
    """Every tensor in a model's output (a `ModelOutput`, tuple, list or tensor), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    return [t for v in value for t in flat(v)]
