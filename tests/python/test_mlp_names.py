"""Issue 19 item 10: the C++ trainer's tensors are named as the state_dict
keys of the equivalent torch.nn.Sequential, so a file written by
`viper train --save-model` loads with load_state_dict(strict=True), no
renaming, and the loaded model is the trained one (its accuracy on
Fashion-MNIST's test images matches what the trainer reported)."""
import gzip
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import viper

CLI = os.environ.get("VIPER_CLI", "")
DATA = os.environ.get("VIPER_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path, header):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


@pytest.mark.skipif(not CLI or not os.path.exists(CLI), reason="VIPER_CLI (the viper binary) not given")
@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")),
                    reason="dataset-fashion-mnist not installed")
def test_trainer_file_loads_into_nn_sequential(tmp_path):
    model_path, json_path = tmp_path / "mlp.safetensors", tmp_path / "train.json"
    subprocess.run([CLI, "train", "--max-iterations", "60", "--hidden", "32,16", "--train-samples", "4000",
                    "--val-samples", "500", "--test-samples", "2000", "--data-dir", DATA,
                    "--save-model", str(model_path), "--json", str(json_path)],
                   check=True, capture_output=True, text=True)
    summary = json.loads(json_path.read_text())
    tensors = viper.load_file(model_path)
    assert list(tensors) == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]

    model = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 10))
    model.load_state_dict(tensors, strict=True)

    images = read_idx(os.path.join(DATA, "t10k-images-idx3-ubyte.gz"), 16).reshape(-1, 784)
    labels = read_idx(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz"), 8)
    x = torch.from_numpy(images.astype(np.float32) / 255.0)  # the trainer's scaling
    with torch.no_grad():
        logits = model(x)
    accuracy = (logits.argmax(1).numpy() == labels).mean()
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels.astype(np.int64))).item()
    # Its test subset is 2,000 of these 10,000 images: the figures agree to
    # sampling error; a wrong mapping (transposed or swapped layers) could
    # not load, and untrained weights score ~0.1 and ~2.3.
    assert abs(accuracy - summary["last_test_accuracy"]) < 0.05, (accuracy, summary["last_test_accuracy"])
    assert abs(loss - summary["last_test_loss"]) < 0.15, (loss, summary["last_test_loss"])
    assert accuracy > 0.5
