"""dlib's face descriptor in torch: the .dat reader, the network against dlib-bin on real faces (ORL), the weight cache."""

from __future__ import annotations

import importlib.util
from collections import Counter

import numpy as np
import pytest
import torch

from bench.errors import BenchError
from bench.faces import dlib_torch
from bench.faces.dlib_serial import DlibFormatError, _Reader, read_network

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("dlib") is None or importlib.util.find_spec("face_recognition_models") is None,
    reason="needs dlib-bin and face-recognition-models (pip install 'privbench[faces]')")


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a CPU shared with other jobs, two wait at every convolution's barrier."""
    from bench.nn.threads import cpu_threads

    with cpu_threads(1):
        yield


@pytest.fixture(scope="module")
def dat():
    from bench.faces.dlib_resnet import model_files

    return model_files()[1]


@pytest.fixture(scope="module")
def chips():
    """Eight real faces (ORL, one per person) as dlib's 150 x 150 chips, aligned by its shape predictor in the centred box."""
    from bench.faces.align import Located, centred_boxes
    from bench.faces.dlib_resnet import DlibResNet
    from tests.unit.test_recognizers import orl

    images, _ = orl()
    images = images[::5]
    n, _, h, w = images.shape
    located = Located(centred_boxes(n, h, w), torch.full((n, 5, 2), float("nan")), torch.zeros(n, dtype=torch.bool))
    return np.stack(DlibResNet(engine="dlib").chips(images, located))


def test_integers_and_floats_decode_as_dlib_writes_them():
    r = _Reader(bytes([0x01, 0x05, 0x81, 0x05, 0x02, 0x00, 0x01, 0x03, 0x0A, 0xD7, 0xA3, 0x81, 0x1C]))
    assert (r.int(), r.int(), r.int()) == (5, -5, 256)
    assert r.float() == pytest.approx(0.04, rel=1e-6)  # 0xa3d70a * 2**-28: loss_metric's margin in the shipped file
    with pytest.raises(DlibFormatError, match="end of file"):
        r.int()


def test_the_reader_finds_every_layer_of_the_shipped_file_with_its_shape(dat):
    net = read_network(dat, dlib_torch.structure())
    kinds = Counter(layer.kind for layer in net.layers)
    assert kinds == {"con": 29, "affine": 29, "relu": 29, "tag": 18, "add_prev": 14, "avg_pool": 5, "skip": 4,
                     "max_pool": 1, "fc": 1}
    assert net.input_size == (150, 150) and np.allclose(net.input_means, (122.782, 117.001, 104.298))
    assert net.loss["version"] == "loss_metric_2"
    convs = [layer for layer in net.layers if layer.kind == "con"]
    assert convs[0].tensors["weight"].shape == (32, 3, 7, 7)
    expected, c_in = [], 32
    for ch, down in dlib_torch.blocks():
        expected += [((ch, c_in, 3, 3), 2 if down else 1), ((ch, ch, 3, 3), 1)]
        c_in = ch
    assert [(c.tensors["weight"].shape, c.meta["stride_y"]) for c in convs[1:]] == expected
    assert all(c.meta["padding_y"] == (0 if c.meta["stride_y"] == 2 else c.meta["nr"] // 2) for c in convs)
    assert [layer.tensors["weight"].shape for layer in net.layers if layer.kind == "fc"] == [(128, 256)]
    state = dlib_torch.state_dict_of(net)
    dlib_torch.DlibFaceNet().load_state_dict(state)  # strict: every tensor present, every shape right
    assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in state.values())


def test_a_truncated_or_foreign_file_is_refused_by_byte_offset(dat, tmp_path):
    head = tmp_path / "head.dat"
    head.write_bytes(dat.read_bytes()[:5000])
    with pytest.raises(DlibFormatError, match="at byte"):
        read_network(head, dlib_torch.structure())
    with pytest.raises(DlibFormatError, match="at byte"):  # the shape predictor: no network at all
        read_network(dat.with_name("shape_predictor_5_face_landmarks.dat"), dlib_torch.structure())


def test_add_prev_pads_each_operand_with_zeros_to_the_larger_shape():
    a, b = torch.ones(1, 2, 3, 3), torch.full((1, 1, 4, 4), 10.0)
    out = dlib_torch.add_prev(a, b)
    assert out.shape == (1, 2, 4, 4)
    assert out[0, 0, :3, :3].eq(11).all() and out[0, 0, 3].eq(10).all() and out[0, 1, :3, :3].eq(1).all()
    assert out[0, 1, 3].eq(0).all() and out[0, 1, :, 3].eq(0).all()


def test_torch_descriptors_equal_dlibs_on_real_faces(dat, chips):
    from bench.faces.dlib_resnet import DlibResNet

    reference = DlibResNet(engine="dlib").describe(chips)
    got = dlib_torch.describe(dlib_torch.load(dat), chips, batch_size=4)
    cos = (reference * got).sum(1) / (np.linalg.norm(reference, axis=1) * np.linalg.norm(got, axis=1))
    assert cos.min() >= 0.9999, cos
    assert np.abs(reference - got).max() < 1e-4


def test_same_input_gives_the_same_output_whatever_the_batch(dat, chips):
    net = dlib_torch.load(dat)
    first = dlib_torch.describe(net, chips, batch_size=8)
    assert np.array_equal(first, dlib_torch.describe(net, chips, batch_size=8))
    assert np.allclose(first, dlib_torch.describe(net, chips, batch_size=1), atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_network_runs_on_a_gpu_with_the_cpus_descriptors(dat, chips):
    cpu = dlib_torch.describe(dlib_torch.load(dat), chips)
    gpu = dlib_torch.describe(dlib_torch.load(dat, "cuda"), chips)
    cos = (cpu * gpu).sum(1) / (np.linalg.norm(cpu, axis=1) * np.linalg.norm(gpu, axis=1))
    assert cos.min() >= 0.9999, cos


def test_converted_weights_are_cached_by_the_files_digest_and_read_back(dat, tmp_path):
    fresh = dlib_torch.convert(dat)
    _, digest = dlib_torch.converted(dat, tmp_path)
    entries = [p for p in (tmp_path / "weights" / "dlib").iterdir() if not p.name.startswith(".")]  # not the lock
    assert len(entries) == 1 and (entries[0] / "MANIFEST.json").is_file() and len(digest) == 64
    dlib_torch._converted.cache_clear()
    again, _ = dlib_torch.converted(dat, tmp_path)  # read from the verified entry
    assert again.keys() == fresh.keys() and all(torch.equal(again[k], fresh[k]) for k in fresh)


def test_the_dlib_recognizer_runs_in_torch_by_default_and_refuses_other_engines():
    from bench.faces.dlib_resnet import DlibResNet

    rec = DlibResNet()
    assert rec.engine == "torch" and rec.source.endswith(":torch") and rec.net is not None
    assert DlibResNet(engine="dlib").net is None
    with pytest.raises(BenchError, match="unknown engine"):
        DlibResNet(engine="onnx")
