"""``bench release`` end to end: secure noise, no metadata, orientation, modes, validation."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import ExifTags, Image, ImageCms, PngImagePlugin

from bench.cli import main
from bench.core.registry import mechanisms
from bench.data.imageio import atomic_write
from bench.randomness.streams import Streams

XMP = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description dc:creator="Alice"/></rdf:RDF></x:xmpmeta>'
SOI = b"\xff\xd8"
METADATA_MARKERS = (b"Exif", b"<x:xmpmeta", b"ICC_PROFILE", b"iCCP", b"tEXt", b"zTXt", b"iTXt", b"eXIf", b"Alice")
JFIF_KEYS = {"jfif", "jfif_version", "jfif_unit", "jfif_density"}


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _noise(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _exif_with_gps_and_thumbnail(thumbnail: bytes) -> bytes:
    """EXIF with a camera name, a GPS position and IFD1 pointing at an embedded JPEG thumbnail."""
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = "Camera"
    gps = exif.get_ifd(ExifTags.IFD.GPSInfo)
    gps[ExifTags.GPS.GPSLatitudeRef], gps[ExifTags.GPS.GPSLatitude] = "N", (52.0, 22.0, 1.0)
    tiff = bytearray(exif.tobytes()[6:])
    assert tiff[:2] == b"MM"
    next_ifd = 10 + 12 * int.from_bytes(tiff[8:10], "big")
    ifd1 = len(tiff) + len(tiff) % 2
    tiff += b"\0" * (ifd1 - len(tiff))
    tiff[next_ifd : next_ifd + 4] = ifd1.to_bytes(4, "big")
    data = ifd1 + 2 + 3 * 12 + 4
    tiff += (3).to_bytes(2, "big")
    for tag, kind, value in ((0x0103, 3, (6).to_bytes(2, "big") + b"\0\0"), (0x0201, 4, data.to_bytes(4, "big")),
                             (0x0202, 4, len(thumbnail).to_bytes(4, "big"))):
        tiff += tag.to_bytes(2, "big") + kind.to_bytes(2, "big") + (1).to_bytes(4, "big") + value
    tiff += b"\0\0\0\0" + thumbnail
    return b"Exif\0\0" + bytes(tiff)


def _tagged_jpeg(path: Path) -> None:
    thumb = io.BytesIO()
    Image.fromarray(_noise(8, 8, 5)).save(thumb, "JPEG")
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.fromarray(_noise(32, 48, 1)).save(path, "JPEG", exif=_exif_with_gps_and_thumbnail(thumb.getvalue()),
                                              xmp=XMP, icc_profile=icc)


def _texted_png(path: Path) -> None:
    info = PngImagePlugin.PngInfo()
    info.add_text("Author", "Alice")
    info.add_text("Comment", "Alice at home", zip=True)
    info.add_itxt("XML:com.adobe.xmp", XMP.decode())
    Image.fromarray(_noise(32, 48, 2)).save(path, "PNG", pnginfo=info)


def _rotated_png(path: Path) -> None:
    """40 wide, 20 high, red left half, blue right half; EXIF orientation 6 (turn 90 degrees clockwise)."""
    pixels = np.zeros((20, 40, 3), dtype=np.uint8)
    pixels[:, :20, 0] = 255
    pixels[:, 20:, 2] = 255
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = 6
    Image.fromarray(pixels).save(path, "PNG", exif=exif.tobytes())


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Images with metadata and in every mode, in nested folders, plus a file that is not an image."""
    root = tmp_path / "in"
    (root / "nested").mkdir(parents=True)
    _tagged_jpeg(root / "tagged.jpg")
    _texted_png(root / "texted.png")
    _rotated_png(root / "rotated.png")
    Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8) * 4).save(root / "grey.png")
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(root / "cmyk.tif")
    Image.fromarray(np.array([[0, 65535], [32896, 257]], dtype=np.uint16)).save(root / "deep.png")
    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    rgba[0, 0] = (255, 0, 0, 0)
    rgba[0, 1] = (0, 0, 255, 255)
    rgba[1, 0] = (0, 0, 0, 128)
    Image.fromarray(rgba).save(root / "nested" / "alpha.png")
    (root / "notes.txt").write_text("not an image")
    return root


def _has_metadata(path: Path) -> list[str]:
    data = path.read_bytes()
    found = [marker.decode() for marker in METADATA_MARKERS if marker in data]
    if data.count(SOI) > 1:
        found.append("second JPEG SOI (thumbnail)")
    with Image.open(path) as image:
        if len(image.getexif()):
            found.append("getexif")
        extra = set(image.info) - JFIF_KEYS
        if extra:
            found.append(f"info {sorted(extra)}")
    return found


def test_inputs_really_carry_metadata(folder: Path):
    assert {"Exif", "<x:xmpmeta", "ICC_PROFILE", "Alice", "second JPEG SOI (thumbnail)", "getexif"} <= set(
        _has_metadata(folder / "tagged.jpg"))
    with Image.open(folder / "tagged.jpg") as image:
        assert image.getexif().get_ifd(ExifTags.IFD.GPSInfo)[ExifTags.GPS.GPSLatitudeRef] == "N"
        assert image.getexif().get_ifd(ExifTags.IFD.IFD1)[0x0202] > 0
    assert {"tEXt", "zTXt", "iTXt"} <= set(_has_metadata(folder / "texted.png"))


@pytest.mark.parametrize("fmt, suffix", [("png", ".png"), ("jpeg", ".jpg")])
def test_release_strips_metadata_and_converts_every_mode(capsys, folder: Path, tmp_path: Path, fmt: str, suffix: str):
    out = tmp_path / "out"
    code, stdout, err = _run(capsys, "release", "--mechanism", "identity", "--in", str(folder), "--out", str(out),
                             "--format", fmt)
    assert code == 0, err
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    names = ["cmyk", "deep", "grey", "nested/alpha", "rotated", "tagged", "texted"]
    assert written == sorted([n + suffix for n in names] + ["release.json"])
    for name in names:
        assert _has_metadata(out / (name + suffix)) == [], name
    assert "Released 7 images" in stdout and "Skipped 1 files" in stdout and "No formal claim" in stdout
    manifest = json.loads((out / "release.json").read_text())
    assert manifest["count"] == 7 and manifest["format"] == fmt and manifest["skipped_files"] == 1
    text = (out / "release.json").read_text()
    assert not [word for word in (str(folder), "tagged", "rotated", "Alice", "Camera") if word in text]
    if fmt == "png":  # lossless: check the pixels
        _check_converted_pixels(out, folder)


def _pixels(path: Path, mode: str = "RGB") -> np.ndarray:
    with Image.open(path) as image:
        assert image.mode == mode  # a one-channel input is released with one channel
        return np.asarray(image.convert("RGB"))


def _check_converted_pixels(out: Path, folder: Path) -> None:
    rotated = _pixels(out / "rotated.png")
    assert rotated.shape == (40, 20, 3)  # orientation 6 applied: now 20 wide, 40 high
    assert (rotated[:20, :, 0] == 255).all() and (rotated[:20, :, 2] == 0).all()  # red on top
    assert (rotated[20:, :, 2] == 255).all() and (rotated[20:, :, 0] == 0).all()
    grey = _pixels(out / "grey.png", "L")
    assert (grey[..., 0] == np.arange(64).reshape(8, 8) * 4).all() and (grey == grey[..., :1]).all()
    assert (_pixels(out / "cmyk.png") == (255, 0, 0)).all()
    assert _pixels(out / "deep.png", "L")[..., 0].tolist() == [[0, 255], [128, 1]]
    alpha = _pixels(out / "nested" / "alpha.png")
    assert alpha[0, 0].tolist() == [255, 255, 255] and alpha[0, 1].tolist() == [0, 0, 255]
    assert alpha[1, 0].tolist() == [127, 127, 127]
    assert (_pixels(out / "texted.png") == _noise(32, 48, 2)).all()


def _release(capsys, source: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return _run(capsys, "release", "--mechanism", "dp_pix", "--param", "epsilon=1", "--in", str(source),
                "--out", str(out), *extra)


def test_dp_pix_release_is_fresh_every_time_and_never_the_seeded_one(capsys, tmp_path: Path):
    source = tmp_path / "in"
    source.mkdir()
    clean = np.stack([_noise(64, 64, i) for i in range(3)])
    for i, pixels in enumerate(clean):
        Image.fromarray(pixels).save(source / f"{i}.png")
    outputs = []
    for attempt in range(2):
        code, stdout, err = _release(capsys, source, tmp_path / f"out{attempt}")
        assert code == 0, err
        assert "Claim: epsilon=1 [m-pixel (m=1)]" in stdout and "not reproducible" in stdout
        outputs.append(np.stack([_pixels(tmp_path / f"out{attempt}" / f"{i}.png") for i in range(3)]))
    assert not np.array_equal(outputs[0], outputs[1])
    images = torch.from_numpy(clean).permute(0, 3, 1, 2).contiguous()
    seeded = mechanisms.get("dp_pix")(epsilon=1).apply(images, generator=Streams.for_images(0, "release/test", 3))
    seeded = seeded.permute(0, 2, 3, 1).numpy()
    for released in outputs:
        assert not any(np.array_equal(released[i], seeded[i]) for i in range(3))
    manifest = json.loads((tmp_path / "out0" / "release.json").read_text())
    assert manifest["mechanism"] == "dp_pix" and manifest["params"] == {"epsilon": 1.0, "block": 4, "m": 1}
    assert manifest["noise"]["reproducible"] is False and "urandom" in manifest["noise"]["source"]
    assert manifest["noise"]["laplace_max_abs_scales"] == pytest.approx(36.7368, abs=1e-4)
    assert manifest["claim"]["delta"] == 0.0 and manifest["noise"]["tail"]["64x64"]["delta"] == 0.0
    assert "Mironov" in manifest["claim"]["note"] and manifest["sizes"] == {"64x64": 3}


def test_claim_states_the_tail_delta_when_clipping_does_not_absorb_it(capsys, tmp_path: Path):
    source = tmp_path / "in"
    (source / "b").mkdir(parents=True)
    Image.fromarray(_noise(64, 64)).save(source / "a.png")
    Image.fromarray(_noise(30, 50)).save(source / "b" / "small.jpg")
    code, stdout, err = _run(capsys, "release", "--mechanism", "dp_pix", "--param", "epsilon=10", "--in", str(source),
                             "--out", str(tmp_path / "out"), "--format", "jpeg")
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "release.json").read_text())
    assert manifest["claim"]["delta"] == pytest.approx(0.5 * 2.0**-53 * (3 * math.exp(10 / 3) + 3), rel=1e-9)
    assert set(manifest["noise"]["tail"]) == {"64x64", "50x30"} and manifest["sizes"] == {"64x64": 1, "50x30": 1}
    assert (tmp_path / "out" / "b" / "small.jpg").is_file() and "Released 2 images (2 sizes)" in stdout


def test_overwrite_replaces_an_earlier_release(capsys, tmp_path: Path):
    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    Image.fromarray(_noise(16, 16)).save(source / "a.png")
    assert _release(capsys, source, out)[0] == 0
    before = (out / "a.png").read_bytes()
    code, _, err = _release(capsys, source, out)
    assert code == 2 and "--overwrite" in err and (out / "a.png").read_bytes() == before
    assert _release(capsys, source, out, "--overwrite")[0] == 0
    assert (out / "a.png").read_bytes() != before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_face_overlay_with_boxes_from_a_csv(capsys, tmp_path: Path):
    source = tmp_path / "in"
    source.mkdir()
    Image.fromarray(_noise(32, 32)).save(source / "face.png")
    Image.fromarray(_noise(32, 32, 1)).save(source / "empty.png")
    boxes = tmp_path / "boxes.csv"
    boxes.write_text("file,x1,y1,x2,y2\nface.png,4,4,12,12\nempty.png\n")
    code, stdout, err = _run(capsys, "release", "--mechanism", "face_overlay", "--param", "colour=red", "--in",
                             str(source), "--out", str(tmp_path / "out"), "--boxes", str(boxes))
    assert code == 0, err
    face = _pixels(tmp_path / "out" / "face.png")
    assert (face[4:13, 4:13] == (255, 0, 0)).all() and (face[20:, 20:] == _noise(32, 32)[20:, 20:]).all()
    assert (_pixels(tmp_path / "out" / "empty.png") == _noise(32, 32, 1)).all()
    assert "WARNING: 1 images had no face box" in stdout
    manifest = json.loads((tmp_path / "out" / "release.json").read_text())
    assert manifest["boxes"] == {"source": "csv", "images_without_faces": 1} and manifest["claim"] is None


def test_face_blur_detects_with_mtcnn_by_default(capsys, tmp_path: Path):
    source = tmp_path / "in"
    source.mkdir()
    Image.new("RGB", (48, 48), (90, 120, 200)).save(source / "sky.png")
    code, stdout, err = _run(capsys, "release", "--mechanism", "face_blur", "--in", str(source), "--out",
                             str(tmp_path / "out"), "--device", "cpu")
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "release.json").read_text())["boxes"] == {
        "source": "detect (MTCNN)", "images_without_faces": 1}
    assert "WARNING: 1 images had no face box" in stdout


def test_dp_latent_is_fitted_on_public_images_only(capsys, tmp_path: Path):
    source, public = tmp_path / "in", tmp_path / "public"
    source.mkdir()
    public.mkdir()
    for i in range(3):
        Image.fromarray(_noise(16, 16, i)).save(source / f"{i}.png")
    for i in range(8):
        Image.fromarray(_noise(24, 24, 100 + i)).save(public / f"p{i}.png")  # resized to 16x16 for the fit
    params = ["--param", "steps=20", "--param", "latent_dim=8", "--param", "epsilon=50"]
    code, _, err = _run(capsys, "release", "--mechanism", "dp_latent", *params, "--in", str(source), "--out",
                        str(tmp_path / "out"), "--fit-on", str(public), "--cache-dir", str(tmp_path / "cache"))
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "release.json").read_text())
    assert manifest["fitted_on_public_images"] == 8 and manifest["claim"]["unit"] == "latent (clipped)"
    assert manifest["noise"]["tail"]["16x16"]["delta"] == 0.0  # 50 <= 8 x 36.7: clipping absorbs the clamp
    assert (tmp_path / "out" / "2.png").is_file()
    Image.fromarray(_noise(16, 16, 0)).save(public / "leaked.png")
    code, _, err = _run(capsys, "release", "--mechanism", "dp_latent", *params, "--in", str(source), "--out",
                        str(tmp_path / "out2"), "--fit-on", str(public))
    assert code == 2 and "among the images being released" in err and not (tmp_path / "out2").exists()


SEEDS_MECHANISM = '''
from bench.core.interfaces import Mechanism, ParamSpace
from bench.core.registry import register_mechanism

@register_mechanism("release_test_seeded")
class Seeded(Mechanism):
    params = ParamSpace()

    def apply(self, images, *, generator, boxes=None):
        generator.seeds_on(images.device)
        return images.clone()
'''

CLAIMED_MECHANISM = '''
from bench.core.interfaces import Mechanism, ParamSpace, PrivacyClaim
from bench.core.registry import register_mechanism

@register_mechanism("release_test_claimed")
class Claimed(Mechanism):
    params = ParamSpace()

    def apply(self, images, *, generator, boxes=None):
        generator.laplace((10,))
        generator.derive("more").normal((2,))
        return images.clone()

    def claim(self):
        return PrivacyClaim(1.0, 1e-9, "test unit")
'''


def test_mechanism_files_counter_based_kernels_are_refused_and_claims_get_the_coupling_delta(capsys, tmp_path: Path):
    source = tmp_path / "in"
    source.mkdir()
    Image.fromarray(_noise(8, 8)).save(source / "a.png")
    (tmp_path / "seeded.py").write_text(SEEDS_MECHANISM)
    (tmp_path / "claimed.py").write_text(CLAIMED_MECHANISM)
    code, _, err = _run(capsys, "release", "--mechanism-file", str(tmp_path / "seeded.py"), "--mechanism",
                        "release_test_seeded", "--in", str(source), "--out", str(tmp_path / "out1"))
    assert code == 2 and "seeds" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out1").exists()
    code, _, err = _run(capsys, "release", "--mechanism-file", str(tmp_path / "claimed.py"), "--mechanism",
                        "release_test_claimed", "--in", str(source), "--out", str(tmp_path / "out2"))
    assert code == 0, err
    claim = json.loads((tmp_path / "out2" / "release.json").read_text())["claim"]
    assert claim["delta"] == pytest.approx(1e-9 + (1 + math.e) * (10 * 2.0**-53 + 2 * 2.0**-32), rel=1e-9)


def _corrupt(source: Path) -> None:
    data = (source / "a.png").read_bytes()
    (source / "a.png").write_bytes(data[: len(data) // 2])


def _csv(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "boxes.csv"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def _a_file(tmp_path: Path) -> str:
    path = tmp_path / "a_file"
    path.write_text("not a folder\n")
    return str(path)


ERRORS = {
    "missing input": (lambda t, s: ["--mechanism", "identity", "--in", str(t / "nope")], "no such folder"),
    "no images": (lambda t, s: ["--mechanism", "identity", "--in", str(t / "empty")], "no images found"),
    "out inside in": (lambda t, s: ["--mechanism", "identity", "--out", str(s / "released")], "overlap"),
    "in inside out": (lambda t, s: ["--mechanism", "identity", "--out", str(t)], "overlap"),
    "unknown mechanism": (lambda t, s: ["--mechanism", "dp_pixx"], "did you mean 'dp_pix'"),
    "bad parameter": (lambda t, s: ["--mechanism", "dp_pix", "--param", "epsilon=-1"], "epsilon"),
    "unknown parameter": (lambda t, s: ["--mechanism", "dp_pix", "--param", "sigma=1"], "sigma"),
    "dp_latent without --fit-on": (lambda t, s: ["--mechanism", "dp_latent"], "--fit-on"),
    "--fit-on for dp_pix": (lambda t, s: ["--mechanism", "dp_pix", "--fit-on", str(s)], "drop --fit-on"),
    "--fit-on inside --in": (lambda t, s: ["--mechanism", "dp_latent", "--fit-on", str(s / "sub")], "overlaps --in"),
    "--cache-dir is a file": (lambda t, s: ["--mechanism", "dp_latent", "--fit-on", str(t / "empty"),
                                            "--cache-dir", _a_file(t)], "--cache-dir"),
    "--boxes for dp_pix": (lambda t, s: ["--mechanism", "dp_pix", "--boxes", "detect"], "drop --boxes"),
    "boxes file missing": (lambda t, s: ["--mechanism", "face_blur", "--boxes", str(t / "x.csv")], "existing CSV"),
    "image not in boxes": (lambda t, s: ["--mechanism", "face_blur", "--boxes", _csv(t, "a.png,1,1,5,5\n")],
                           "not listed"),
    "unknown file in boxes": (lambda t, s: ["--mechanism", "face_blur", "--boxes", _csv(t, "z.png,1,1,5,5\n")],
                              "not an image under --in"),
    "bad box": (lambda t, s: ["--mechanism", "face_blur", "--boxes", _csv(t, "a.png,5,1,2,5\nsub/b.png\n")],
                "x1 < x2"),
    "boxes not UTF-8": (lambda t, s: ["--mechanism", "face_blur", "--boxes", _csv(t, b"a.png,\xff\xfe\n")],
                        "UTF-8 CSV"),
    "box not numbers": (lambda t, s: ["--mechanism", "face_blur", "--boxes", _csv(t, "a.png,1,a,5,5\nsub/b.png\n")],
                        "must be numbers"),
    "box outside": (lambda t, s: ["--mechanism", "face_blur", "--boxes", _csv(t, "a.png,50,50,60,60\nsub/b.png\n")],
                    "outside"),
    "corrupt image": (lambda t, s: (_corrupt(s), ["--mechanism", "identity"])[1], "cannot read image"),
    "name collision": (lambda t, s: ((s / "sub" / "b.jpg").write_bytes((s / "sub" / "b.png").read_bytes()),
                                     ["--mechanism", "identity"])[1], "would both be written"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_user_errors_are_one_line_exit_2_and_write_nothing(capsys, tmp_path: Path, case: str):
    source = tmp_path / "in"
    (source / "sub").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("x")
    Image.fromarray(_noise(8, 8)).save(source / "a.png")
    Image.fromarray(_noise(8, 8, 1)).save(source / "sub" / "b.png")
    make_args, message = ERRORS[case]
    args = make_args(tmp_path, source)
    if "--in" not in args:
        args += ["--in", str(source)]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    before = sorted(p for p in tmp_path.rglob("*"))
    code, stdout, err = _run(capsys, "release", *args)
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("bench: error:") and message in err, err
    assert sorted(p for p in tmp_path.rglob("*")) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_device_without_cuda_is_a_user_error(capsys, tmp_path: Path):
    (tmp_path / "in").mkdir()
    Image.fromarray(_noise(8, 8)).save(tmp_path / "in" / "a.png")
    code, _, err = _run(capsys, "release", "--mechanism", "identity", "--in", str(tmp_path / "in"), "--out",
                        str(tmp_path / "out"), "--device", "cuda")
    assert code == 2 and "CUDA is not available" in err and not (tmp_path / "out").exists()


def test_an_interrupted_write_leaves_nothing_under_the_final_name(tmp_path: Path):
    def interrupted(f) -> None:
        f.write(b"half an image")
        raise KeyboardInterrupt

    target = tmp_path / "sub" / "a.png"
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    assert list(tmp_path.rglob("*")) == [tmp_path / "sub"]
    target.write_bytes(b"earlier release")
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    assert target.read_bytes() == b"earlier release" and len(list(target.parent.iterdir())) == 1
