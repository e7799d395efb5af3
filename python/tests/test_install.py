"""The package as installed: it imports from where it was put, says its version, and computes.

scripts/check-pip.sh runs the whole suite against a `pip install` into a fresh virtual environment,
with KATTN_EXPECT_INSTALLED=1: kattn must then come from that environment's site-packages, with pip's
metadata, and never from the source tree."""
import importlib.metadata
import os
import sysconfig

import numpy as np
import pytest

import kattn

installed = os.environ.get("KATTN_EXPECT_INSTALLED") == "1"


def textbook(q, k, v):
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(axis=-1, keepdims=True), v)


@pytest.mark.skipif(not installed, reason="KATTN_EXPECT_INSTALLED=1 only (scripts/check-pip.sh)")
def test_imported_from_the_environment_with_pip_metadata():
    package_dir = os.path.dirname(os.path.realpath(kattn.__file__))
    site = os.path.realpath(sysconfig.get_path("platlib"))
    assert os.path.dirname(package_dir) == site, f"kattn imported from {package_dir}, not from {site}"
    assert importlib.metadata.version("kattn") == kattn.version()


def test_a_call_matches_the_textbook():
    rng = np.random.default_rng()
    q = rng.standard_normal((1, 6, 2, 8))
    k, v = rng.standard_normal((2, 1, 3, 2, 8))
    o = kattn.attention(q, k, v)
    assert o.shape == q.shape and o.strides[-1] == o.itemsize
    assert np.abs(o - textbook(q, k, v)).max() <= 1e-12


def test_build_info_names_the_kokkos_backends():
    info = kattn.build_info()
    assert info["version"] == kattn.version()
    assert info["backends"]
