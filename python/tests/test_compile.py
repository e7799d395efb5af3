"""kattn.torch's custom ops under torch.compile(fullgraph=True), and torch.library.opcheck's checks
of them (the fake implementations against the real ones, the autograd registration). They need a
torch with torch.library.custom_op (2.4 or newer: CI's venv); with an older torch kattn.torch is an
autograd.Function and these skip."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import kattn  # noqa: E402
import kattn.torch  # noqa: E402

pytestmark = pytest.mark.skipif(not kattn.torch._CUSTOM_OPS, reason=f"needs torch.library.custom_op (torch >= 2.4; "
                                                                     f"this is {torch.__version__}): runs in CI's venv")


class Block(torch.nn.Module):
    """A transformer-style block whose attention is kattn's, in each of its three conventions."""

    def __init__(self, d=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.q = torch.nn.Linear(d, d)
        self.kv = torch.nn.Linear(d, 2 * kv_heads * self.hd)
        self.out = torch.nn.Linear(3 * d, d)

    def forward(self, x, cu_seqlens):
        B, N, _ = x.shape
        q = self.q(x).view(B, N, self.heads, self.hd)
        k, v = self.kv(x).view(B, N, 2, self.kv_heads, self.hd).unbind(2)
        sdpa = kattn.torch.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                        is_causal=True, enable_gqa=True).transpose(1, 2)
        flash = kattn.flash_attn_func(q, k, v, causal=True, window_size=(5, 0))
        packed = kattn.flash_attn_varlen_func(q.reshape(B * N, self.heads, self.hd), k.reshape(B * N, self.kv_heads,
                                              self.hd), v.reshape(B * N, self.kv_heads, self.hd), cu_seqlens,
                                              cu_seqlens, N, N, causal=True).view(B, N, self.heads, self.hd)
        return self.out(torch.cat([sdpa, flash, packed], dim=-1).reshape(B, N, -1))


def test_a_model_compiles_with_fullgraph_and_matches_eager():
    torch.manual_seed(0)
    model = Block().double()
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    cu_seqlens = torch.tensor([0, 12, 24], dtype=torch.int32)
    eager = model(x, cu_seqlens)
    eager.square().sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x, cu_seqlens)
    out.square().sum().backward()
    assert (out - eager).abs().max() <= 1e-12
    for p, g in zip(model.parameters(), eager_grads):
        assert (p.grad - g).abs().max() <= 1e-11


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_ops_pass_opcheck(dtype):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 5, h, 8, generator=g).to(dtype).requires_grad_() for h in (4, 2, 2))
    options = kattn.torch._options(causal=True, window=(3, -1), alibi_slopes=[0.5, 0.0, 0.25, 1.0])
    torch.library.opcheck(torch.ops.kattn.attention.default, (q, k, v, None, None, "bnhd", *options))
    bias = torch.randn(1, 4, 5, 5, generator=g).to(dtype)  # [1, Hq, Nq, Nk]: a bias tensor, no gradient
    torch.library.opcheck(torch.ops.kattn.attention.default, (q, k, v, None, bias, "bnhd", *options))
    learned = bias.clone().requires_grad_()  # with its gradient
    torch.library.opcheck(torch.ops.kattn.attention.default, (q, k, v, None, learned, "bnhd", *options))
    cu = torch.tensor([0, 4, 10], dtype=torch.int64)
    packed = [t.detach().reshape(10, t.shape[2], 8).requires_grad_() for t in (q, k, v)]
    torch.library.opcheck(torch.ops.kattn.ragged_attention.default, (*packed, None, cu, cu, 6, 6, *options))
