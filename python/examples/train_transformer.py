"""Train a small decoder-only transformer twice from one seed: once with kattn's attention
(kattn.torch.scaled_dot_product_attention, PyTorch's call by kattn) and once with PyTorch's own
attention math, and compare the losses.

    python3 train_transformer.py --attention both --dtype float64 --steps 50 [--device cuda]

The task is a lagged copy: the target at position t is the token at position t - lag, which a
causal model can only solve by attending `lag` positions back. Both runs see the same initial
weights, the same batches and the same optimizer, so their losses differ only by the rounding
of the two attention implementations. Exits with status 1 if any step's relative loss
difference exceeds --tolerance.
"""
import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEFAULT_TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


@dataclass
class Config:
    vocab: int = 8
    seq: int = 128
    batch: int = 2
    d_model: int = 32
    heads: int = 4
    layers: int = 2
    lag: int = 2
    steps: int = 50
    lr: float = 1e-2
    seed: int = 0
    dtype: str = "float64"
    device: str = "cpu"


def torch_attention(q, k, v):
    """Causal softmax(q k^T / sqrt(D)) v on [B, H, N, D], written with plain torch ops."""
    n, d = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d))
    future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_function(name):
    """The attention a model uses: "torch" (the math above) or "kattn" (the call a model makes to
    torch.nn.functional.scaled_dot_product_attention, from kattn.torch instead)."""
    if name == "torch":
        return torch_attention
    import kattn.torch  # here, so that a torch-only run needs no kattn build, and outside the timed loop

    return functools.partial(kattn.torch.scaled_dot_product_attention, is_causal=True)


class Block(torch.nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg, attention):
        super().__init__()
        self.heads = cfg.heads
        self.attention = attention
        self.norm1 = torch.nn.LayerNorm(cfg.d_model)
        self.qkv = torch.nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = torch.nn.Linear(cfg.d_model, cfg.d_model)
        self.norm2 = torch.nn.LayerNorm(cfg.d_model)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(cfg.d_model, 4 * cfg.d_model), torch.nn.GELU(),
                                       torch.nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x):
        b, n, c = x.shape
        # [B, N, 3C] -> three [B, H, N, D], as scaled_dot_product_attention takes them.
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        o = self.attention(q, k, v).transpose(1, 2).reshape(b, n, c)
        x = x + self.proj(o)
        return x + self.mlp(self.norm2(x))


class Transformer(torch.nn.Module):
    def __init__(self, cfg, attention):
        super().__init__()
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.d_model)
        self.position = torch.nn.Parameter(0.02 * torch.randn(cfg.seq, cfg.d_model))
        self.blocks = torch.nn.ModuleList(Block(cfg, attention) for _ in range(cfg.layers))
        self.norm = torch.nn.LayerNorm(cfg.d_model)
        self.head = torch.nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_batches(cfg):
    """cfg.steps batches of (tokens, targets); targets before position lag are -1 (ignored)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    tokens = torch.randint(0, cfg.vocab, (cfg.steps, cfg.batch, cfg.seq), generator=gen)
    targets = torch.full_like(tokens, -1)
    targets[..., cfg.lag:] = tokens[..., : -cfg.lag]
    return list(zip(tokens.to(cfg.device), targets.to(cfg.device)))


def train(cfg, attention_name, batches):
    """Per-step losses (floats) and the wall time of the training loop in seconds."""
    torch.manual_seed(cfg.seed)  # the same seed gives both runs the same initial weights
    model = Transformer(cfg, attention_function(attention_name)).to(cfg.device, getattr(torch, cfg.dtype))
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    losses = []
    start = time.perf_counter()
    for tokens, targets in batches:
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1), ignore_index=-1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, time.perf_counter() - start


def relative_differences(losses_a, losses_b):
    return [abs(a - b) / max(abs(b), sys.float_info.min) for a, b in zip(losses_a, losses_b)]


def compare(cfg):
    """Train with both attentions; returns (kattn losses, torch losses, per-step rel. diffs, times)."""
    batches = make_batches(cfg)
    kattn_losses, kattn_time = train(cfg, "kattn", batches)
    torch_losses, torch_time = train(cfg, "torch", batches)
    return kattn_losses, torch_losses, relative_differences(kattn_losses, torch_losses), (kattn_time, torch_time)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attention", choices=["kattn", "torch", "both"], default="both")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--steps", type=int, default=Config.steps)
    p.add_argument("--seq", type=int, default=Config.seq)
    p.add_argument("--batch", type=int, default=Config.batch)
    p.add_argument("--seed", type=int, default=Config.seed)
    p.add_argument("--device", default=Config.device, help="cpu, or cuda (a kattn built with a CUDA Kokkos)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest allowed per-step relative loss difference (default: 1e-10 float64, 1e-4 float32)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = Config(steps=args.steps, seq=args.seq, batch=args.batch, seed=args.seed, dtype=args.dtype,
                 device=args.device)
    if args.attention != "both":
        losses, seconds = train(cfg, args.attention, make_batches(cfg))
        for step, loss in enumerate(losses):
            print(f"{step:4d}  {loss:.12g}")
        print(f"{args.attention}: {seconds:.3f} s")
        return 0
    tolerance = DEFAULT_TOLERANCE[args.dtype] if args.tolerance is None else args.tolerance
    kattn_losses, torch_losses, rel, (kattn_time, torch_time) = compare(cfg)
    print(f"{'step':>4}  {'kattn loss':>20}  {'torch loss':>20}  {'rel. diff':>9}")
    for step, (a, b, r) in enumerate(zip(kattn_losses, torch_losses, rel)):
        print(f"{step:4d}  {a:20.15g}  {b:20.15g}  {r:9.2e}")
    worst = math.nan if any(map(math.isnan, rel)) else max(rel, default=0.0)  # max() would skip a NaN
    print(f"max relative difference {worst:.3e} (tolerance {tolerance:.0e}), "
          f"wall time kattn {kattn_time:.3f} s, torch {torch_time:.3f} s")
    if not worst <= tolerance:  # also fails on NaN
        print("FAIL: relative loss difference above tolerance", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
