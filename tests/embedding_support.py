"""A tiny real ONNX embedding model and tokenizer, built by the tests (nothing is
downloaded): for the embedder's tests and the fake model hub's."""

from __future__ import annotations

import numpy as np
import pytest

VOCAB = ["[PAD]", "[UNK]", "dog", "puppy", "car", "truck", "the", "a"]


def make_model(folder, *, dim: int = 4) -> None:
    """A real ONNX model (an embedding table looked up by token id, i.e. a static embedding
    model) and a real tokenizer.json, in the layout of a sentence-transformers export."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from tokenizers import Tokenizer, models, pre_tokenizers

    table = np.zeros((len(VOCAB), dim), dtype=np.float32)
    table[2, 0] = table[3, 0] = 1  # dog and puppy mean the same
    table[4, 1] = table[5, 1] = 1  # so do car and truck
    table[6, 2] = table[7, 2] = 0.1
    table[1, 3] = 1
    node = helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"])
    graph = helper.make_graph(
        [node], "tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", dim])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
