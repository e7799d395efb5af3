"""examples/train_transformer.py: training with kattn.torch.scaled_dot_product_attention tracks PyTorch's
own attention."""
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the training example needs PyTorch")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_transformer.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_transformer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# seq 96 is not a multiple of a power-of-two tile, so the last key/query tile is a partial one.
@pytest.mark.parametrize("dtype, tolerance", [("float64", 1e-10), ("float32", 1e-4)])
def test_losses_match_torch_attention(example, dtype, tolerance):
    cfg = example.Config(seq=96, batch=2, steps=50, dtype=dtype)
    kattn_losses, torch_losses, rel, _ = example.compare(cfg)
    assert len(rel) == cfg.steps
    over = [step for step, r in enumerate(rel) if not r <= tolerance]  # NaN counts as over
    assert not over, "\n".join(
        f"step {step}: kattn loss {kattn_losses[step]!r}, torch loss {torch_losses[step]!r}, "
        f"relative difference {rel[step]:.3e}" for step in over[:5])
    assert torch_losses[-1] < torch_losses[0]  # the model learns, so the gradients are exercised


def test_main_exit_status(example, capsys):
    args = ["--dtype", "float32", "--steps", "3", "--seq", "32"]
    assert example.main(args) == 0
    assert "wall time kattn" in capsys.readouterr().out
    assert example.main(args + ["--tolerance", "-1"]) == 1  # no difference is below a negative tolerance
