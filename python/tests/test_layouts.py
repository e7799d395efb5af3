"""One meaning per argument: the generic calls read layout="bnhd" unless told "bhnd" (kattn.torch's
takes it in every call), causal is bottom-right wherever it is called causal, and a tensor whose
shape reads either way gives, in each convention, that convention's answer."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import kattn  # noqa: E402
import kattn.torch  # noqa: E402


def ambiguous(seed=0):
    """[2, 6, 6, 8] three times: [B, N, H, D] and [B, H, N, D] alike."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 6, 6, 8, dtype=torch.float64, generator=g) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
def test_bnhd_calls_agree_with_flash_attn(causal):
    q, k, v = ambiguous(1)
    flash = kattn.flash_attn_func(q, k, v, causal=causal)
    assert torch.equal(kattn.attention(q, k, v, causal=causal), flash)  # the default layout
    assert torch.equal(kattn.attention(q, k, v, causal=causal, layout="bnhd"), flash)
    assert torch.equal(kattn.torch.attention(q, k, v, causal=causal, layout="bnhd"), flash)
    assert np.array_equal(kattn.flash_attn_func(q.numpy(), k.numpy(), v.numpy(), causal=causal), flash.numpy())


@pytest.mark.parametrize("causal", [False, True])
def test_bhnd_calls_agree_with_scaled_dot_product_attention(causal):
    q, k, v = ambiguous(2)  # Nq == Nk: top-left and bottom-right causal are the same mask
    sdpa = kattn.torch.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert torch.equal(kattn.attention(q, k, v, causal=causal, layout="bhnd"), sdpa)
    assert torch.equal(kattn.torch.attention(q, k, v, causal=causal, layout="bhnd"), sdpa)
    flash = kattn.flash_attn_func(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal)
    assert torch.equal(flash.transpose(1, 2), sdpa)


def test_the_two_readings_differ_so_none_is_guessed():
    q, k, v = ambiguous(3)
    bnhd, bhnd = (kattn.attention(q, k, v, layout=layout) for layout in ("bnhd", "bhnd"))
    assert (bnhd - bhnd).abs().max() > 0.1
    with pytest.raises(kattn.Error, match=re.escape('layout: kattn.torch.attention reads q, k, v in the layout its '
                                                    'caller names: "bnhd"')):
        kattn.torch.attention(q, k, v)
    with pytest.raises(kattn.Error, match=re.escape("layout: kattn.torch.ring_attention reads")):
        kattn.torch.ring_attention(None, q, k, v)


def test_causal_with_fewer_queries_than_keys_is_bottom_right_in_kattn_and_flash_attn():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64, generator=g)
    k, v = (torch.randn(1, 10, 2, 8, dtype=torch.float64, generator=g) for _ in range(2))
    flash = kattn.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(kattn.attention(q, k, v, causal=True), flash)
    assert torch.equal(kattn.torch.attention(q, k, v, causal=True, layout="bnhd"), flash)
    # SDPA's is_causal on the same problem ([B, H, N, D]) is top-left: query i sees keys 0..i.
    sdpa = kattn.torch.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
    top_left = kattn.flash_attn_func(q, k[:, :4], v[:, :4], causal=True)
    assert torch.equal(sdpa.transpose(1, 2), top_left) and (top_left - flash).abs().max() > 0.1


def test_the_plain_calls_give_numpy_for_numpy_and_tensors_for_tensors():
    q, k, v = ambiguous(5)
    o = kattn.attention(q.numpy(), k.numpy(), v.numpy(), layout="bhnd")
    assert isinstance(o, np.ndarray) and np.array_equal(o, kattn.attention(q, k, v, layout="bhnd").numpy())
