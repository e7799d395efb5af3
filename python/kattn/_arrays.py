"""NumPy arrays and DLPack tensors (PyTorch CPU tensors) in, results in the caller's kind out.

Inputs are read in place: a tensor is viewed as a NumPy array through DLPack (no copy), and
results go back as tensors sharing the NumPy result's memory. NumPy has no bfloat16: a
torch.bfloat16 tensor's memory is read as int16 and viewed as kattn's bfloat16 dtype (a structured
dtype of the bits, _kattn.bfloat16), and such results go back as torch.bfloat16 views.
"""

import numpy as np

from ._kattn import Error, bfloat16


def as_array(x, name):
    """x as a NumPy array without a copy; a DLPack tensor must be a CPU tensor not needing grad."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        if getattr(x, "requires_grad", False):
            raise Error(f"{name}: requires grad; use kattn.torch.attention for autograd, or pass {name}.detach()")
        device = getattr(x, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise Error(f"{name}: expected a CPU tensor, got one on {device}")
        bf16 = str(getattr(x, "dtype", "")) == "torch.bfloat16"
        try:
            if bf16:  # only PyTorch tensors have this dtype
                import torch

                return np.from_dlpack(x.view(torch.int16)).view(bfloat16)
            return np.from_dlpack(x)
        except (RuntimeError, TypeError, BufferError) as e:
            raise Error(f"{name}: cannot be read through DLPack: {e}") from None
    raise Error(f"{name}: expected a NumPy array or a CPU tensor (DLPack), got {type(x).__name__}")


def index_array(x, name):
    """An index array (indptr, page table) as NumPy; lists and tensors are accepted."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        return as_array(x, name)
    return np.asarray(x)


def dtype_name(dtype):
    """The name kattn gives a dtype ("float16", "bfloat16", ...) from a string, a NumPy dtype or
    type, or a torch dtype; "" for None."""
    if dtype is None:
        return ""
    if isinstance(dtype, str):
        return dtype
    if str(dtype).startswith("torch."):
        return str(dtype)[len("torch."):]
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise Error(f"dtype: expected a dtype or its name, got {dtype!r}") from None
    return "bfloat16" if dt == bfloat16 else dt.name


def returner(like):
    """A function that gives NumPy results back in the kind of `like` (a tensor for a tensor)."""
    if isinstance(like, np.ndarray) or not hasattr(like, "__dlpack__"):
        return lambda a: a
    import torch  # only tensors from PyTorch come here

    if isinstance(like, torch.Tensor):
        return to_tensor
    return lambda a: a


def to_tensor(a):
    """A NumPy result as a PyTorch tensor sharing its memory (kattn's bfloat16 as torch.bfloat16)."""
    import torch

    if a.dtype == bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
