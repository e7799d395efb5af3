"""The Python examples of the README and of docs/python.md run: each ```python block of a page, in
order, in one namespace per page (a later block may use what an earlier one made). A block that
needs PyTorch or kattn.dist (mpi4py and kattn's MPI layer) skips, saying so, where those are not
there."""
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "python.md"]
FENCE = re.compile(r"^( *)```python\n(.*?)^\1```", re.M | re.S)


def blocks(page):
    return [textwrap.dedent(m.group(2)) for m in FENCE.finditer(page.read_text())]


def missing(block):
    """What a block needs that is not installed, or None."""
    needs = []
    if "torch" in block:
        needs.append(("torch", "PyTorch"))
    if "kattn.dist" in block or "mpi4py" in block:
        needs.append(("mpi4py.MPI", "mpi4py"))
    for module, name in needs:
        try:
            __import__(module)
        except ImportError:
            return f"{name} is not installed"
    if "kattn.dist" in block:
        import kattn

        if not hasattr(kattn._kattn, "dist_attention"):
            return "kattn was built without its MPI layer"
    return None


EXAMPLES = [(page, i, block) for page in PAGES for i, block in enumerate(blocks(page))]
NAMESPACES = {page: {"__name__": f"docs_{page.stem}"} for page in PAGES}  # pytest runs the examples in order


def test_every_page_has_examples():
    for page in PAGES:
        assert blocks(page), f"{page.name}: no ```python examples"


@pytest.mark.parametrize("page, i, block", EXAMPLES, ids=[f"{p.name}-{i + 1}" for p, i, _ in EXAMPLES])
def test_example_runs(page, i, block):
    why = missing(block)
    if why:
        pytest.skip(why)
    exec(compile(block, f"{page.name}, example {i + 1}", "exec"), NAMESPACES[page])
