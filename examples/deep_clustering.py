"""Deep clustering on scikit-learn's digits: an encoder and ``RBFKMeansLayer`` trained jointly.

The 1 797 8x8 handwritten digits (10 classes, shipped with scikit-learn) clustered four ways,
each scored by ARI and NMI against the true digits, with its time:

1. K-Means on the raw pixels (the engine's ``RBFKMeans``);
2. K-Means on the codes of a plain autoencoder (trained from scratch, no pretrained
   weights);
3. IDEC: that autoencoder fine-tuned with the layer's Student-t kernel (DEC's soft
   assignment), DEC's KL loss on its sharpened target plus the reconstruction loss;
4. annealed soft K-Means: the same fine-tuning with the layer's free energy (the engine's
   objective) under a falling temperature (``SigmaScheduler``) plus the reconstruction.

Both joint methods start from (2)'s encoder and centres. Runs on the CPU in a few minutes
and on CUDA when present (``--device``); the figures are in benchmarks/README.md.

    python examples/deep_clustering.py
    python examples/deep_clustering.py --pretrain-epochs 2 --epochs 2   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from torch import nn

from rbfkm_engine import RBFKMeans
from rbfkm_engine.nn import RBFKMeansLayer, SigmaScheduler, dec_loss, dec_target, free_energy

N_CLUSTERS = 10
CODE_SIZE = 10
#: The joint training's learning rate, and the weights of the clustering losses next to
#: the reconstruction's.
JOINT_LR = 1e-3
DEC_WEIGHT = 0.1
FREE_ENERGY_WEIGHT = 0.01


@dataclass(frozen=True)
class Score:
    """One method's clustering of the digits."""

    method: str
    ari: float
    nmi: float
    seconds: float


@dataclass
class Autoencoder:
    encoder: nn.Module
    decoder: nn.Module

    def parameters(self) -> Iterator[nn.Parameter]:
        yield from self.encoder.parameters()
        yield from self.decoder.parameters()


def load(device: torch.device) -> tuple[torch.Tensor, np.ndarray]:
    """The digits' pixels scaled to ``[0, 1]``, and their labels."""
    digits = load_digits()
    x = torch.as_tensor(digits.data / 16.0, dtype=torch.float32, device=device)
    return x, digits.target


def autoencoder(n_features: int, device: torch.device) -> Autoencoder:
    """A small fully connected autoencoder ``n_features -> CODE_SIZE -> n_features``."""
    encoder = nn.Sequential(
        nn.Linear(n_features, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
        nn.Linear(128, CODE_SIZE),
    )  # fmt: skip
    decoder = nn.Sequential(
        nn.Linear(CODE_SIZE, 128), nn.ReLU(), nn.Linear(128, 256), nn.ReLU(),
        nn.Linear(256, n_features),
    )  # fmt: skip
    return Autoencoder(encoder.to(device), decoder.to(device))


def batches(n: int, size: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Shuffled index batches covering ``n`` rows once."""
    order = torch.randperm(n, generator=gen)
    yield from order.split(size)


def reconstruction(ae: Autoencoder, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The codes of ``x`` and their reconstruction's mean squared error."""
    z = ae.encoder(x)
    return z, ((ae.decoder(z) - x) ** 2).mean()


def pretrain(ae: Autoencoder, x: torch.Tensor, epochs: int, gen: torch.Generator) -> None:
    """Train the autoencoder on reconstruction alone."""
    opt = torch.optim.Adam(ae.parameters(), lr=1e-3)
    for _ in range(epochs):
        for idx in batches(x.shape[0], 128, gen):
            opt.zero_grad()
            reconstruction(ae, x[idx.to(x.device)])[1].backward()
            opt.step()


@torch.no_grad()
def codes(ae: Autoencoder, x: torch.Tensor) -> torch.Tensor:
    return ae.encoder(x)


def kmeans(z: torch.Tensor, seed: int) -> RBFKMeans:
    """The engine's K-Means (hard) on rows ``z``."""
    km = RBFKMeans(n_clusters=N_CLUSTERS, assignment="hard", random_state=seed)
    return km.fit(z.detach().cpu().numpy())


def idec(
    ae: Autoencoder, layer: RBFKMeansLayer, x: torch.Tensor, epochs: int, gen: torch.Generator
) -> None:
    """IDEC: reconstruction + DEC_WEIGHT KL(P || Q), the target P refreshed every epoch on all
    the data (as DEC does every few batches)."""
    opt = torch.optim.Adam([*ae.parameters(), *layer.parameters()], lr=JOINT_LR)
    for _ in range(epochs):
        with torch.no_grad():
            target = dec_target(layer(codes(ae, x)))
        for idx in batches(x.shape[0], 256, gen):
            idx = idx.to(x.device)
            opt.zero_grad()
            z, rec = reconstruction(ae, x[idx])
            (rec + DEC_WEIGHT * dec_loss(layer(z), target[idx])).backward()
            opt.step()


def annealed(
    ae: Autoencoder, layer: RBFKMeansLayer, x: torch.Tensor, epochs: int, gen: torch.Generator
) -> None:
    """Reconstruction + FREE_ENERGY_WEIGHT J_sigma / (mean squared code norm), sigma
    cooled per epoch from the codes' mean distance to their centre down a hundredfold.
    Dividing by the codes' scale (not differentiated) keeps the encoder from shrinking
    every code to lower the free energy."""
    inertia = float(layer.distances(codes(ae, x)).detach().amin(dim=-1).mean())
    cooling = 0.01 ** (1.0 / max(epochs - 1, 1))
    schedule = SigmaScheduler(layer, sigma0=inertia, sigma_min=inertia / 100, cooling=cooling)
    opt = torch.optim.Adam([*ae.parameters(), *layer.parameters()], lr=JOINT_LR)
    for _ in range(epochs):
        for idx in batches(x.shape[0], 256, gen):
            opt.zero_grad()
            z, rec = reconstruction(ae, x[idx.to(x.device)])
            out = layer.cluster(z)
            j = free_energy(out.responsibilities, out.energies, layer.sigma, layer.assignment)
            scale = (z.detach() ** 2).sum(dim=-1).mean()
            (rec + FREE_ENERGY_WEIGHT * j / scale).backward()
            opt.step()
        schedule.step()


def _agreement(y: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """ARI and NMI of ``labels`` against the digits, rounded."""
    ari, nmi = adjusted_rand_score(y, labels), normalized_mutual_info_score(y, labels)
    return round(float(ari), 3), round(float(nmi), 3)


def timed(method: str, y: np.ndarray, run: Callable[[], np.ndarray], before: float = 0.0) -> Score:
    """Score ``run()``'s labels; the time counts ``before`` seconds spent to get there."""
    start = time.perf_counter()
    labels = run()
    seconds = before + time.perf_counter() - start
    return Score(method, *_agreement(y, labels), round(seconds, 2))


def main(argv: list[str] | None = None) -> list[Score]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-epochs", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x, y = load(device)
    scores = [timed("K-Means, raw pixels", y, lambda: kmeans(x, args.seed).labels_)]

    ae = autoencoder(x.shape[1], device)
    start = time.perf_counter()
    pretrain(ae, x, args.pretrain_epochs, gen)
    km = kmeans(codes(ae, x), args.seed)
    kmeans_seconds = time.perf_counter() - start  # the joint methods' start, timed too
    scores.append(
        Score("autoencoder + K-Means", *_agreement(y, km.labels_), round(kmeans_seconds, 2))
    )
    weights = {k: v.clone() for k, v in ae.encoder.state_dict().items()}
    decoder_weights = {k: v.clone() for k, v in ae.decoder.state_dict().items()}

    def joint(train: Callable, **layer_kwargs) -> np.ndarray:
        ae.encoder.load_state_dict(weights)
        ae.decoder.load_state_dict(decoder_weights)
        layer = RBFKMeansLayer.from_estimator(km, **layer_kwargs).to(device)
        train(ae, layer, x, args.epochs, gen)
        with torch.no_grad():
            return layer(codes(ae, x)).argmax(dim=-1).cpu().numpy()

    scores.append(
        timed(
            "IDEC (Student-t, DEC loss)",
            y,
            lambda: joint(idec, assignment="softmax", kernel="student_t", sigma=1.0),
            kmeans_seconds,
        )
    )
    scores.append(
        timed(
            "annealed free energy (softmax)",
            y,
            lambda: joint(annealed, assignment="softmax", sigma=1.0),
            kmeans_seconds,
        )
    )
    report(scores, args)
    return scores


def report(scores: list[Score], args: argparse.Namespace) -> None:
    """A markdown table; the times run from the raw pixels (pretraining included)."""
    if args.json:
        print(json.dumps([asdict(s) for s in scores]))
        return
    print(f"digits, device={args.device}, seed={args.seed}")
    print("| method | ARI | NMI | time (s) |\n| --- | --- | --- | --- |")
    for s in scores:
        print(f"| {s.method} | {s.ari:.3f} | {s.nmi:.3f} | {s.seconds:.2f} |")


if __name__ == "__main__":
    main()
