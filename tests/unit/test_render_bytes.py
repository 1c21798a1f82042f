"""The synthetic datasets are the same bytes on every machine (issue 62).

A dataset's fingerprint is a hash of its bytes and boards are keyed by it, so the
renderers (``bench/data/synthetic``) must not depend on the CPU: see
``bench/data/synthetic/_exact.py`` for the arithmetic they are restricted to. This test
renders a small sample of every synthetic dataset (every split, every kind of image) in
subprocesses under different kernel settings and compares

* the bytes of everything a dataset holds (images, labels, attributes, boxes), and
* the float images just before they are rounded to bytes (``_exact.to_uint8``): a
  difference in the last bit of a float shows up there long before it flips a byte of a
  sample this small;

between settings (``ATEN_CPU_CAPABILITY=default`` against the machine's own instruction
set, one thread against two), and against checksums shipped here, so that a machine
whose arithmetic differs from the one the checksums were made on (CI on another CPU)
fails, naming the dataset.

When a renderer changes on purpose (bump its ``GENERATOR_VERSION``), print the new
checksums with ``.venv/bin/python tests/unit/test_render_bytes.py`` and paste them below.

Run as a script, the file renders the samples and prints their digests as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

EXPECTED = {
    "synth_faces": {"bytes": "54d927e96e844660", "floats": "9172184bcfdba0b4"},
    "synth_persons": {"bytes": "7617367be4ef0fb9", "floats": "f0f636a2ac237087"},
    "synth_scenes": {"bytes": "09f649f0a12ce3c0", "floats": "4f223adacfce9d95"},
    "synth_objects": {"bytes": "0cc7c3171c0052ce", "floats": "c12b4982b95fb0f1"},
}
"""SHA-256 (first 16 hex digits) of each dataset's sample: its bytes, and its float images before rounding."""

ROOT = Path(__file__).resolve().parents[2]


def _sample(name: str) -> Any:
    """Renders dataset ``name``'s sample: small, but every split and kind of image, and draws of 16+ values."""
    if name == "synth_faces":
        from bench.data.synthetic import synth_faces

        return synth_faces.generate(n_ids=20, per_id=2, size=64, split_ids=(10, 4, 6), variation=2.0, seed=0)
    if name == "synth_persons":
        from bench.data.synthetic import synth_persons

        sets, _ = synth_persons.generate(synth_persons.resolve_options({"n_ids": 16, "per_id": 4}))
        resized = synth_persons._resize(sets["gallery"].images[:8], (64, 32))  # the size option's resampling
        return {"sets": {k: vars(v) for k, v in sets.items()}, "resized": resized}
    if name == "synth_scenes":
        from bench.data.synthetic import synth_scenes

        data = synth_scenes.generate(classes=10, images_per_class=3, val_per_class=1, test_per_class=1, size=128,
                                     identities=16, seed=0)
        data["design"] = {k: v for k, v in data["design"].items() if k != "names"}
        return data
    if name == "synth_objects":
        from bench.data.synthetic import synth_objects

        return synth_objects.generate(n_train=40, n_val=20, n_test=20, n_population=20, size=32, seed=0,
                                      variation=1.0)
    raise KeyError(name)


def _walk(obj: Any, h: Any, where: str = "") -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"{where}:{t.dtype}:{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            _walk(obj[k], h, f"{where}/{k}")
    elif isinstance(obj, (list, tuple)):
        h.update(f"{where}:{len(obj)}".encode())
        for i, item in enumerate(obj):
            _walk(item, h, f"{where}[{i}]")
    else:
        h.update(f"{where}={obj!r}".encode())


def render_digests() -> dict[str, dict[str, str]]:
    """Renders every sample; returns dataset -> SHA-256 of its bytes and of its float images."""
    from bench.data.synthetic import _exact

    rounding = _exact.to_uint8
    seen: list[str] = []

    def watched(img: Any) -> Any:
        t = img.detach().contiguous()
        seen.append(hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode() + t.numpy().tobytes()).hexdigest())
        return rounding(img)

    _exact.to_uint8 = watched
    out = {}
    try:
        for name in EXPECTED:
            seen.clear()
            h = hashlib.sha256()
            _walk(_sample(name), h)
            floats = hashlib.sha256("".join(sorted(seen)).encode())  # chunks finish in any order
            out[name] = {"bytes": h.hexdigest()[:16], "floats": floats.hexdigest()[:16]}
    finally:
        _exact.to_uint8 = rounding
    return out


def _render_in_subprocesses(settings: list[tuple[str, int]], tmp_path: Path) -> dict[tuple[str, int], dict]:
    """Renders the samples once per (ATEN_CPU_CAPABILITY, threads) setting, in subprocesses side by side."""
    runs = {}
    for capability, threads in settings:
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "OMP_NUM_THREADS": str(threads),
               "MKL_NUM_THREADS": str(threads), "MLFLOW_DISABLE_TELEMETRY": "true",
               "BENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
        runs[capability, threads] = subprocess.Popen([sys.executable, __file__, str(threads)], env=env, cwd=tmp_path,
                                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    for (capability, threads), proc in runs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"rendering under {capability}, {threads} thread(s) failed:\n{stderr[-3000:]}"
        out[capability, threads] = json.loads(stdout.strip().splitlines()[-1])
    return out


def test_same_bytes_under_every_kernel_setting_and_as_shipped(tmp_path: Path) -> None:
    import torch

    own = torch.backends.cpu.get_cpu_capability().lower()
    settings = [("default", 1), (own if own in ("avx2", "avx512", "sve256") else "default", 2)]
    if own == "avx512":
        settings.append(("avx2", 1))
    runs = _render_in_subprocesses(settings, tmp_path)
    first, reference = next(iter(runs.items()))
    for setting, digests in runs.items():
        for name, digest in digests.items():
            assert digest == reference[name], (
                f"{name}: rendered differently under ATEN_CPU_CAPABILITY={setting[0]} with {setting[1]} thread(s) "
                f"than under {first[0]} with {first[1]} ({digest} != {reference[name]})")
    drifted = [f"{name} ({kind}: {reference[name][kind]}, shipped {want})" for name, expected in EXPECTED.items()
               for kind, want in expected.items() if reference[name][kind] != want]
    assert not drifted, (f"synthetic data drifted from the shipped checksums on this machine: {', '.join(drifted)} "
                         "(a renderer changed, or this CPU computes it differently; see tests/unit/test_render_bytes.py)")


if __name__ == "__main__":
    import torch

    if len(sys.argv) > 1:
        torch.set_num_threads(int(sys.argv[1]))
    print(json.dumps(render_digests()))
