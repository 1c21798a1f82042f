"""Differential privacy in a generator's latent space (latent-space imaging paper)."""

from __future__ import annotations

import contextlib
from typing import Iterator, Protocol, runtime_checkable

import torch
from torch import nn

from bench.core.interfaces import Mechanism, Param, ParamSpace, PrivacyClaim, RunContext, Streams
from bench.core.registry import register_mechanism
from bench.data.base import ImageSet, fingerprint
from bench.errors import BenchError
from bench.randomness.seeding import derive_seed
from bench.storage.cache import Cache
from mechanisms._dp import latent_scale
from mechanisms._ops import to_uint8

_BATCH = 256
_SMALL_STEP_VALUES = 1 << 18


@runtime_checkable
class LatentGenerator(Protocol):
    """An encoder/decoder pair between images and latent vectors.

    Attributes:
        latent_dim: Number of latent components d.
    """

    latent_dim: int

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Maps float images [N, C, H, W] in [0, 1] to latents [N, d]."""

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Maps latents [N, d] to float images [N, C, H, W] in [0, 1]."""


class ConvAutoencoder(nn.Module):
    """A small convolutional autoencoder: two stride-2 convolutions and a linear bottleneck.

    Images are padded (edge replicated) to a multiple of 4 and cropped back.

    Args:
        channels: Image channels C.
        height: Image height H.
        width: Image width W.
        latent_dim: Latent components d.
    """

    def __init__(self, channels: int, height: int, width: int, latent_dim: int):
        super().__init__()
        self.shape = (channels, height, width)
        self.latent_dim = latent_dim
        self.pad = (0, -width % 4, 0, -height % 4)
        h4, w4 = (height + self.pad[3]) // 4, (width + self.pad[1]) // 4
        self.grid = (64, h4, w4)
        self.encoder = nn.Sequential(
            nn.Conv2d(channels, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(64 * h4 * w4, latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, 64 * h4 * w4), nn.ReLU(), nn.Unflatten(1, self.grid),
            nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(32, channels, 4, stride=2, padding=1), nn.Sigmoid(),
        )

    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Maps float images [N, C, H, W] in [0, 1] to latents [N, d]."""
        x = nn.functional.pad(images.to(self._dtype()), self.pad, mode="replicate")
        return self.encoder(x)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Maps latents [N, d] to images [N, C, H, W] in [0, 1]."""
        _, height, width = self.shape
        return self.decoder(latents.to(self._dtype()))[..., :height, :width]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Reconstructs images."""
        return self.decode(self.encode(images))


def train_autoencoder(
    images: torch.Tensor, latent_dim: int, steps: int, seed: int, device: torch.device | str = "cpu"
) -> ConvAutoencoder:
    """Trains a :class:`ConvAutoencoder` on uint8 images with MSE, deterministically.

    Args:
        images: uint8 [N, C, H, W] public images.
        latent_dim: Latent components d.
        steps: Adam steps (batches of up to 64 images, drawn with a seeded generator).
        seed: Seed of the initial weights and of the batch order.
        device: Where to train.

    Returns:
        The trained model in eval mode, float32, on ``device``.
    """
    _, c, h, w = images.shape
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ConvAutoencoder(c, h, w, latent_dim)
    model.to(device).train()
    data = images.to(device)
    order = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    batch = min(64, len(data))
    with _threads_for(batch * c * h * w, torch.device(device)):
        for _ in range(steps):
            index = torch.randint(0, len(data), (batch,), generator=order).to(device)
            x = data[index].float() / 255
            loss = nn.functional.mse_loss(model(x), x)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
    return model.eval()


@contextlib.contextmanager
def _threads_for(values_per_step: int, device: torch.device) -> Iterator[None]:
    """Trains tiny CPU models on one thread: thread start-up would dominate every kernel."""
    before = torch.get_num_threads()
    small = device.type == "cpu" and values_per_step < _SMALL_STEP_VALUES
    if small:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if small:
            torch.set_num_threads(before)


def _encode_all(generator: LatentGenerator, images: torch.Tensor, device: torch.device) -> torch.Tensor:
    parts = []
    with torch.no_grad():
        for start in range(0, len(images), _BATCH):
            x = images[start : start + _BATCH].to(device).float() / 255
            parts.append(generator.encode(x).double())
    return torch.cat(parts)


@register_mechanism("dp_latent")
class DPLatent(Mechanism):
    """epsilon-LDP on a clipped latent vector (latent-space imaging paper, Alg. 2).

    ``fit`` trains the generator (by default a small convolutional autoencoder on the
    public split, seeded, cached under ``ctx.cache_dir`` by the content of the public
    images) and sets per-component clip bounds at the ``clip_low`` / ``clip_high``
    quantiles of the public latents. ``apply`` encodes, clips every component to its
    bounds, adds Laplace noise of scale ``(upper - lower) d / epsilon`` per component
    (budget split evenly), clips again and decodes. Any encoder/decoder pair can be
    plugged in with :meth:`use_generator` (or by overriding :meth:`build_generator`).

    The guarantee covers the clipped latent (and, by post-processing, the image decoded
    from it); how much identity the latent carries depends on the generator.
    """

    description = "Encode, clip, Laplace noise per latent component (epsilon/d each), clip, decode."
    params = ParamSpace(
        epsilon=Param(float, 100.0, low=0.0, low_open=True, log=True, tune=(1.0, 1e4), help="total privacy budget"),
        clip_low=Param(float, 0.05, low=0.0, high=1.0, tune=(0.0, 0.25), help="quantile of the lower clip bound"),
        clip_high=Param(float, 0.95, low=0.0, high=1.0, tune=(0.75, 1.0), help="quantile of the upper clip bound"),
        latent_dim=Param(int, 32, low=1, tune=(8, 128), help="latent components d of the default autoencoder"),
        steps=Param(int, 300, low=1, tune=(100, 3000), help="training steps of the default autoencoder",
                    cost="linear"),
    )
    conformance_params = {"steps": 25}

    def __init__(self, **params):
        super().__init__(**params)
        if not self.config["clip_low"] < self.config["clip_high"]:
            raise BenchError(
                f"mechanism {self.name!r}: clip_low ({self.config['clip_low']}) must be below "
                f"clip_high ({self.config['clip_high']})"
            )
        self._plugged: LatentGenerator | None = None
        self.generator: LatentGenerator | None = None
        self.lower: torch.Tensor | None = None
        self.upper: torch.Tensor | None = None
        self.shape: tuple[int, int, int] | None = None
        self.device = torch.device("cpu")

    def use_generator(self, generator: LatentGenerator) -> "DPLatent":
        """Plugs in a trained encoder/decoder pair; ``fit`` then only sets the clip bounds."""
        if not isinstance(generator, LatentGenerator):
            raise BenchError("a latent generator needs latent_dim, encode(images) and decode(latents)")
        self._plugged = generator
        return self

    def cache_key(self, public: ImageSet, ctx: RunContext) -> str:
        """Returns the cache key of the default autoencoder trained on ``public``."""
        cfg = self.config
        return fingerprint("dp_latent", self.version, public.images, cfg["latent_dim"], cfg["steps"], ctx.seed)

    def build_generator(self, public: ImageSet, ctx: RunContext) -> LatentGenerator:
        """Returns the default generator: the cached (verified) or freshly trained autoencoder."""
        _, c, h, w = public.images.shape
        model = ConvAutoencoder(c, h, w, self.config["latent_dim"])

        def train() -> dict[str, torch.Tensor]:
            ctx.log(f"dp_latent: training an autoencoder on {len(public)} public images")
            seed = derive_seed(ctx.seed, "dp_latent", "train")
            trained = train_autoencoder(public.images, self.config["latent_dim"], self.config["steps"], seed, ctx.device)
            return {k: v.detach().cpu() for k, v in trained.state_dict().items()}

        state, _ = Cache(ctx.cache_dir).get_or_build("dp_latent", self.cache_key(public, ctx), train, "autoencoder")
        model.load_state_dict(state)
        return model.to(ctx.device, torch.float64).eval()

    def fit(self, public: ImageSet, ctx: RunContext) -> None:
        """Builds the generator and sets the clip bounds from the public latents."""
        if len(public) == 0:
            raise BenchError(f"mechanism {self.name!r} needs public images to fit on")
        self.device = torch.device(ctx.device)
        self.generator = self._plugged if self._plugged is not None else self.build_generator(public, ctx)
        latents = _encode_all(self.generator, public.images, self.device)
        self.lower = torch.quantile(latents, self.config["clip_low"], dim=0)
        self.upper = torch.quantile(latents, self.config["clip_high"], dim=0)
        self.shape = tuple(public.images.shape[1:])

    def privatise(self, latents: torch.Tensor, generator: Streams) -> torch.Tensor:
        """Clips latents [N, d], adds the per-component Laplace noise and clips again."""
        lower, upper = self.lower.to(latents.device), self.upper.to(latents.device)
        scale = latent_scale(lower, upper, self.config["epsilon"])
        noise = generator.laplace((latents.shape[1],), latents.dtype).to(latents.device)
        noisy = torch.maximum(torch.minimum(latents, upper), lower).addcmul_(noise, scale)
        return torch.maximum(torch.minimum(noisy, upper), lower)

    def apply(
        self, images: torch.Tensor, *, generator: Streams, boxes: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Returns the images decoded from privatised latents."""
        self.check_inputs(images, generator)
        if self.generator is None:
            raise BenchError(f"mechanism {self.name!r} must be fitted on public data before apply()")
        if tuple(images.shape[1:]) != self.shape:
            raise BenchError(f"mechanism {self.name!r} was fitted on images {self.shape}, got {tuple(images.shape[1:])}")
        with torch.no_grad():
            latents = _encode_all(self.generator, images, self.device)
            decoded = self.generator.decode(self.privatise(latents, generator))
        return to_uint8(decoded.double().mul_(255)).to(images.device)

    def claim(self) -> PrivacyClaim:
        """Returns epsilon-LDP on the clipped latent vector."""
        return PrivacyClaim(
            self.config["epsilon"],
            0.0,
            unit="latent (clipped)",
            note="clip bounds from public data; the image is post-processing of the noisy latent",
        )
