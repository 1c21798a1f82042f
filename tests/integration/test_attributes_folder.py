"""attributes_folder end to end: faces labelled only by gender and age, attacked for their attributes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from bench.cli import main


def write_faces(root: Path, n: int = 160, side: int = 24) -> None:
    """Crops named as UTKFace's (age_gender_race_id.png) whose colour tells the gender; attributes.csv lists them."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    rows = []
    for i in range(n):
        female, age = i % 2, int(rng.integers(1, 90))
        base = np.array([200, 60, 60] if female else [60, 60, 200], np.float64)
        pixels = np.clip(base + rng.normal(0, 40, (side, side, 3)) + age, 0, 255).astype(np.uint8)
        name = f"{age}_{female}_0_{i:05d}.png"
        Image.fromarray(pixels).save(root / name)
        rows.append(f"{name},{('male', 'female')[female]},{age}")
    (root / "attributes.csv").write_text("file,gender,age\n" + "\n".join(rows) + "\n")


def test_a_gender_and_age_folder_is_attacked_for_both(tmp_path, capsys):
    faces, results = tmp_path / "faces", tmp_path / "results"
    write_faces(faces)
    code = main(["run", "--mechanism", "pixelate", "--task", "attributes_folder", "--profile", "smoke",
                 "--set", f"task.data.root={faces}", "--attacks", "attribute_inference",
                 "--set", "attribute_inference.epochs=3", "--results-dir", str(results),
                 "--cache-dir", str(tmp_path / "cache")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "attribute_inference infers age: FairFace's age groups (0-2, 3-9, 10-19" in out.err + out.out
    result = json.loads(next(results.rglob("result.json")).read_text())
    assert result["dataset"] == "attribute_folder" and not result["synthetic"]
    attack = result["attacks"]["attribute_inference"]
    assert attack["test_images_gender"] == attack["test_images_age"] == 32  # 0.2 of 160, stratified by gender
    assert attack["clean_acc_gender"] > attack["majority_gender"] + 0.2  # the colour tells it (1.0 when written)
    assert 0 <= attack["acc_age"] <= 1 and 0 < attack["majority_age"] < 0.5
    assert set(result["groups"]["utility"]["table"]) == {"gender", "age"}  # fidelity by group
    assert set(result["groups"]["attacks"]["attribute_inference.gender"]["table"]) == {"age"}  # never by itself
    assert 0 < result["utility"]["ssim"] < 1
