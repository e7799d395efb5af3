"""The arguments of kattn's calls as kattn._kattn reads them, and results in the caller's kind.

NumPy arrays and PyTorch CPU tensors are read in place: a tensor is viewed as a NumPy array through
DLPack (no copy), and results go back as tensors sharing the NumPy result's memory. NumPy has no
bfloat16: a torch.bfloat16 tensor's memory is read as int16 and viewed as kattn's bfloat16 dtype
(a structured dtype of the bits, _kattn.bfloat16), and such results go back as torch.bfloat16
views. Tensors on a GPU (kattn built with a CUDA or HIP Kokkos) are passed as descriptors of their
memory (pointer, shape, strides, dtype), read in place on that GPU, on PyTorch's current stream;
results are new tensors from PyTorch's allocator there.
"""

import sys

import numpy as np

from . import _kattn
from ._kattn import Error, bfloat16


def _torch_tensor(x):
    """x if it is a torch.Tensor (without importing torch for NumPy callers), else None."""
    torch = sys.modules.get("torch")
    return x if torch is not None and isinstance(x, torch.Tensor) else None


def _refuse_grad(x, name):
    if getattr(x, "requires_grad", False):
        raise Error(f"{name}: requires grad; use kattn.torch (attention, scaled_dot_product_attention) or "
                    f"kattn.flash_attn_func for autograd, or pass {name}.detach()")


def as_array(x, name):
    """x as a NumPy array without a copy; a DLPack tensor must be a CPU tensor not needing grad."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        _refuse_grad(x, name)
        device = getattr(x, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise Error(f"{name}: expected a CPU tensor, got one on {device}")
        dtype = str(getattr(x, "dtype", ""))
        try:
            if dtype == "torch.bfloat16":  # only PyTorch tensors have this dtype
                import torch

                return np.from_dlpack(x.view(torch.int16)).view(bfloat16)
            if dtype == "torch.bool":  # a mask: older PyTorch has no DLPack for bool, byte views alike
                import torch

                return np.from_dlpack(x.view(torch.uint8)).view(np.bool_)
            return np.from_dlpack(x)
        except (RuntimeError, TypeError, BufferError) as e:
            raise Error(f"{name}: cannot be read through DLPack: {e}") from None
    raise Error(f"{name}: expected a NumPy array or a CPU tensor, got {type(x).__name__}")


def _gpu(x):
    """The device of a torch tensor that is not on the CPU, else None."""
    t = _torch_tensor(x)
    return t.device if t is not None and t.device.type != "cpu" else None


def _check_gpu(device, name):
    """Refuses, naming the argument, a tensor on a device this build does not run on."""
    import torch

    built = _kattn.device
    wanted = "hip" if getattr(torch.version, "hip", None) else "cuda"
    if device.type != "cuda":
        raise Error(f"{name}: a tensor on {device}: kattn takes NumPy arrays, CPU tensors and, built with a CUDA or "
                    f"HIP Kokkos, tensors on that GPU")
    if built != wanted:
        backends = _kattn.build_info()["backends"]
        raise Error(f"{name}: a tensor on {device} ({'ROCm' if wanted == 'hip' else 'CUDA'}), but this kattn was built "
                    f"{'for ' + built.upper() if built else 'without a GPU backend'} (Kokkos backends: {backends}): "
                    f"move it to the CPU, or build kattn with a {wanted.upper()} Kokkos")
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index != _kattn.device_id():
        raise Error(f"{name}: a tensor on cuda:{index}, but kattn runs on cuda:{_kattn.device_id()}, the GPU Kokkos "
                    f"took at import (KOKKOS_DEVICE_ID, or CUDA_VISIBLE_DEVICES, chooses it)")



def descriptor(t, name):
    """A tensor's memory as kattn._kattn reads it on a GPU: (data_ptr, shape, strides in bytes,
    dtype name, the tensor)."""
    _refuse_grad(t, name)
    size = t.element_size()
    return (t.data_ptr(), tuple(t.shape), tuple(s * size for s in t.stride()), str(t.dtype)[len("torch."):], t)


def _gpu_target(device):
    """The target of a call on this GPU: how it makes its outputs, and PyTorch's current stream."""
    import torch

    def alloc(shape, dtype):
        return descriptor(torch.empty(shape, dtype=getattr(torch, dtype), device=device), "out")

    return alloc, torch.cuda.current_stream(device).cuda_stream


def arguments(**named):
    """(arrays, target, out) for a call: its arguments as kattn._kattn reads them, where it runs
    (None: the host), and the function that gives its results back in the kind of the first
    argument. The first argument (q) decides: NumPy arrays and CPU tensors run on the host, tensors
    on a GPU there; every other argument must be on the same device."""
    items = list(named.items())
    device = _gpu(items[0][1])
    if device is None:
        for name, x in items[1:]:
            if _gpu(x) is not None:
                raise Error(f"{name}: expected a tensor on the CPU ({items[0][0]}'s device), got one on {x.device}")
        return [as_array(x, name) for name, x in items], None, returner(items[0][1])
    _check_gpu(device, items[0][0])
    for name, x in items[1:]:
        if _torch_tensor(x) is None or x.device != device:
            where = f"one on {x.device}" if _torch_tensor(x) is not None else type(x).__name__
            raise Error(f"{name}: expected a tensor on {device} ({items[0][0]}'s device), got {where}")
    return [descriptor(x, name) for name, x in items], _gpu_target(device), lambda a: a


def index_array(x, name):
    """An index array (indptr, page table) as NumPy; lists and tensors (on any device) are accepted."""
    if isinstance(x, np.ndarray):
        return x
    if _gpu(x) is not None:
        return as_array(x.cpu(), name)
    if hasattr(x, "__dlpack__"):
        return as_array(x, name)
    return np.asarray(x)


def sinks_array(sinks, name="sinks", what="logit"):
    """A per-head option (sinks, alibi_slopes: None, or one `what` per query head: a sequence, an
    array of any float dtype or a tensor on any device) as float64 values on the host, as kattn's
    options take them. A tensor on a GPU is copied, which waits for the work queued on its stream."""
    if sinks is None:
        return None
    if _torch_tensor(sinks) is not None:
        if name == "alibi_slopes" and getattr(sinks, "requires_grad", False):
            raise Error("alibi_slopes: requires grad, but kattn computes no gradient for ALiBi slopes; pass "
                        "alibi_slopes.detach()")
        _refuse_grad(sinks, name)
        import torch

        return sinks.to("cpu", torch.float64).numpy()
    try:
        return np.asarray(sinks, dtype=np.float64)
    except (TypeError, ValueError):
        raise Error(f"{name}: expected one {what} per query head (floats), got {sinks!r:.80}") from None


def window_pair(window, name="window"):
    """(left, right) of a window (None: (-1, -1), unbounded), two integers, else a kattn.Error."""
    if window is None:
        return -1, -1
    try:
        left, right = window
        if int(left) == left and int(right) == right:
            return int(left), int(right)
    except (TypeError, ValueError):
        pass
    raise Error(f"{name}: expected (left, right), two integers (-1: unbounded), got {window!r}")


def checked_indptr(indptr, max_seqlen, name, max_name):
    """A packed batch's offsets on the host, checked against the longest sequence the caller
    announced (max_seqlen; 0: none announced)."""
    host = index_array(indptr, name)
    longest = int((host[1:] - host[:-1]).max()) if host.ndim == 1 and host.size > 1 else 0
    if max_seqlen > 0 and longest > max_seqlen:
        raise Error(f"{max_name}: expected at least the longest sequence ({longest} rows of {name}), got {max_seqlen}")
    return host


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
    if _torch_tensor(like) is not None:
        return to_tensor
    return lambda a: a


def to_tensor(a):
    """A NumPy result as a PyTorch tensor sharing its memory (kattn's bfloat16 as torch.bfloat16)."""
    import torch

    if a.dtype == bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
