"""The catalog's facts checked against the code and the libraries that depend on them."""

from __future__ import annotations

import pytest

from bloomperf.backends import backend_class, backend_names
from bloomperf.catalog.dtypes import DTYPE_TABLE, DTYPES
from bloomperf.catalog.models import MODEL_SHAPES


@pytest.mark.parametrize("backend", backend_names())
def test_every_default_matrix_dtype_is_one_its_backend_supports(backend: str) -> None:
    cls = backend_class(backend)
    for device, dtypes in cls.default_dtypes.items():
        assert set(dtypes) <= set(cls.dtypes), (device, backend, dtypes, cls.dtypes)


def test_every_backend_supports_only_catalog_dtypes() -> None:
    for backend in backend_names():
        assert set(backend_class(backend).dtypes) <= set(DTYPES), backend


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_bytes_are_what_transformers_holds_on_the_meta_device(dtype: str) -> None:
    """A block's matmul weights take ``stored_bytes`` each, its layernorms and the embedding
    ``load_bytes``: for int8, as transformers' 8-bit quantizer counts them (``param_element_size``,
    what accelerate's device map is sized by) on the model from_pretrained prepares."""
    if dtype == "int8":
        pytest.importorskip("bitsandbytes")
    from bloomperf.catalog.device_map import meta_model

    model, quantizer = meta_model(MODEL_SHAPES["tiny"], 1, dtype)
    params = dict(model.named_parameters())

    def size(name: str) -> float:
        if quantizer is None:
            return float(params[name].element_size())
        return float(quantizer.param_element_size(model, name, params[name]))

    table = DTYPE_TABLE[dtype]
    assert size("transformer.h.0.mlp.dense_h_to_4h.weight") == table.stored_bytes
    assert size("transformer.h.0.input_layernorm.weight") == table.load_bytes
    assert size("transformer.word_embeddings.weight") == table.load_bytes


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_torch_dtypes_given_to_the_libraries_have_the_tables_sizes(dtype: str) -> None:
    """What from_pretrained and init_inference are given, read back through torch's own sizes:
    int8 (alone) loads as a 2-byte float and is stored as torch.int8."""
    import torch

    from bloomperf.catalog.dtypes import load_torch_dtype, stored_torch_dtype

    table = DTYPE_TABLE[dtype]
    loaded, stored = load_torch_dtype(dtype), stored_torch_dtype(dtype)
    assert loaded.is_floating_point and loaded.itemsize == table.load_bytes
    assert stored.itemsize == table.stored_bytes
    assert (stored == torch.int8) == (dtype == "int8") == (stored != loaded)
    assert loaded is getattr(torch, table.load) and stored is getattr(torch, table.stored)
