"""Image inputs and outputs of neural networks: colour spaces, the scaler and the mean image,
PNG and JPEG decoding (by path and by base64), crop-and-scale resizing, image outputs, errors.

Each model is one identity-like layer (activation LINEAR 1·x + 0), so its multi-array output
is the preprocessed input blob. References are NumPy (and Pillow for decoding):
- raw pixels, PNG decoding, scaler, mean image, colour conversion: exact (atol 1e-4, float32
  arithmetic of the scaler only);
- JPEG decoding: within ±2 per channel of Pillow's decode;
- resizing (bilinear, half-pixel centres, rounded to bytes): within ±1 per channel (the
  rounding of Float vs float64 at .5);
- image outputs: the PNG decoded by Pillow equals clip(round(blob), 0, 255) exactly.
"""

import base64
import io
import json
import struct
import subprocess
import zlib

import numpy as np
import pytest
from PIL import Image

from nnharness import assert_close, builder, cortado_command, load_error, predict, rng, run_cortado, save


# MARK: helpers

def image_model(c, h, w, bgr=False, scale=1.0, red=0.0, green=0.0, blue=0.0, gray=0.0, preprocess=True):
    """x (image C×H×W) → LINEAR → y (multi-array C×H×W): y is the preprocessed blob."""
    b = builder([("x", (c, h, w))], [("y", (c, h, w))])
    b.add_activation("identity", "LINEAR", "x", "y", params=[1.0, 0.0])
    if preprocess:
        b.set_pre_processing_parameters(image_input_names=["x"], is_bgr=bgr, red_bias=red, green_bias=green,
                                        blue_bias=blue, gray_bias=gray, image_scale=scale)
    return b


def raw(pixels, fmt):
    """Raw-pixel JSON of an H×W×K uint8 array (or H×W floats for GRAY16F)."""
    pixels = np.asarray(pixels)
    h, w = pixels.shape[:2]
    return {"width": int(w), "height": int(h), "pixelFormat": fmt, "data": pixels.reshape(-1).tolist()}


def b64(data):
    return {"base64": base64.b64encode(data).decode()}


def pil_bytes(img, fmt, **kwargs):
    out = io.BytesIO()
    img.save(out, format=fmt, **kwargs)
    return out.getvalue()


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png16(samples, color_type):
    """A 16-bit PNG written by hand (Pillow cannot write 16-bit colour): samples H×W×K uint16."""
    samples = np.asarray(samples, dtype=">u2")
    h, w = samples.shape[:2]
    rows = b"".join(b"\x00" + samples[y].tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(rows)) + png_chunk(b"IEND", b"")


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_interlaced(rgb):
    """An Adam7-interlaced 8-bit RGB PNG written by hand (Pillow does not write interlaced PNGs)."""
    h, w = rgb.shape[:2]
    data = b""
    for x0, y0, dx, dy in ADAM7:
        sub = rgb[y0::dy, x0::dx]
        if sub.size:
            data += b"".join(b"\x00" + row.tobytes() for row in sub)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(data)) + png_chunk(b"IEND", b"")


def chw(pixels):
    """H×W×K → K×H×W floats."""
    pixels = np.asarray(pixels, dtype=np.float64)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return pixels.transpose(2, 0, 1)


def luma(rgb):
    """Pillow's (and Cortado's) integer luma of uint8 RGB."""
    rgb = np.asarray(rgb, dtype=np.int64)
    return (19595 * rgb[..., 0] + 38470 * rgb[..., 1] + 7471 * rgb[..., 2] + 32768) >> 16


def lerp_taps(n, start, span, limit):
    u = np.clip(start + (np.arange(n) + 0.5) * (span / n) - 0.5, 0, limit - 1)
    i0 = np.floor(u).astype(int)
    return i0, np.minimum(i0 + 1, limit - 1), u - i0


def resize_reference(img, dw, dh, mode):
    """Bilinear, half-pixel centres, as the spec of each crop-and-scale mode says; img H×W×K uint8."""
    img = np.asarray(img, dtype=np.float64)
    H, W, K = img.shape
    sx0, sy0, sw, sh = 0.0, 0.0, float(W), float(H)
    ox, oy, bw, bh = 0, 0, dw, dh
    if mode == "centerCrop":
        s = max(dw / W, dh / H)
        sw, sh = dw / s, dh / s
        sx0, sy0 = (W - sw) / 2, (H - sh) / 2
    elif mode == "scaleFit":
        s = min(dw / W, dh / H)
        bw = max(1, min(dw, int(np.floor(W * s + 0.5))))
        bh = max(1, min(dh, int(np.floor(H * s + 0.5))))
        ox, oy = (dw - bw) // 2, (dh - bh) // 2
    x0, x1, tx = lerp_taps(bw, sx0, sw, W)
    y0, y1, ty = lerp_taps(bh, sy0, sh, H)
    tx = tx[None, :, None]
    top = img[y0][:, x0] + tx * (img[y0][:, x1] - img[y0][:, x0])
    bottom = img[y1][:, x0] + tx * (img[y1][:, x1] - img[y1][:, x0])
    box = np.floor(top + ty[:, None, None] * (bottom - top) + 0.5)
    out = np.zeros((dh, dw, K))
    out[oy:oy + bh, ox:ox + bw] = box
    return out


def failure(model_path, row, cwd=None):
    """Runs one row that must fail; returns stderr."""
    inp = model_path.parent / "bad.jsonl"
    inp.write_text(json.dumps(row) + "\n")
    proc = subprocess.run(cortado_command() + ["predict", str(model_path), "--input", str(inp)],
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode != 0, f"expected a failure, got:\n{proc.stdout[:1000]}"
    return proc.stderr


# MARK: colour spaces and preprocessing on raw pixels

def test_rgb_scaler(tmp_path):
    px = rng(1).integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    b = image_model(3, 4, 5, scale=0.5, red=-1.0, green=2.0, blue=3.5)
    out = predict(b, {"x": raw(px, "RGB8")}, tmp_path)
    expected = 0.5 * chw(px) + np.array([-1.0, 2.0, 3.5])[:, None, None]
    assert_close(out["y"], expected, rtol=0, atol=1e-4)


def test_bgr_scaler_puts_blue_first(tmp_path):
    px = rng(2).integers(0, 256, size=(3, 4, 3), dtype=np.uint8)
    b = image_model(3, 3, 4, bgr=True, scale=2.0, red=10.0, green=20.0, blue=30.0)
    out = predict(b, {"x": raw(px, "RGB8")}, tmp_path)
    bgr = chw(px)[::-1]
    expected = 2.0 * bgr + np.array([30.0, 20.0, 10.0])[:, None, None]
    assert_close(out["y"], expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("bgr", [False, True])
def test_bgra8_input(bgr, tmp_path):
    px = rng(3).integers(0, 256, size=(3, 4, 4), dtype=np.uint8)  # B, G, R, A
    b = image_model(3, 3, 4, bgr=bgr)
    out = predict(b, {"x": raw(px, "BGRA8")}, tmp_path)
    rgb = px[..., [2, 1, 0]]
    expected = chw(rgb)[::-1] if bgr else chw(rgb)
    assert_close(out["y"], expected, rtol=0, atol=0)


def test_grayscale_input_and_gray_bias(tmp_path):
    px = rng(4).integers(0, 256, size=(5, 6), dtype=np.uint8)
    b = image_model(1, 5, 6, scale=1 / 255, gray=-0.5)
    out = predict(b, {"x": raw(px, "GRAY8")}, tmp_path)
    assert_close(out["y"], chw(px) / 255 - 0.5, rtol=0, atol=1e-6)


def test_colour_image_into_gray_model_uses_pillow_luma(tmp_path):
    px = rng(5).integers(0, 256, size=(5, 6, 3), dtype=np.uint8)
    b = image_model(1, 5, 6)
    out = predict(b, {"x": raw(px, "RGB8")}, tmp_path)
    pillow = np.asarray(Image.fromarray(px, "RGB").convert("L"))
    assert np.array_equal(pillow, luma(px)), "the reference luma must be Pillow's"
    assert_close(out["y"], chw(pillow), rtol=0, atol=0)


def test_gray_image_into_rgb_model_repeats_the_channel(tmp_path):
    px = rng(6).integers(0, 256, size=(3, 4), dtype=np.uint8)
    b = image_model(3, 3, 4, red=1.0, green=2.0, blue=3.0)
    out = predict(b, {"x": raw(px, "GRAY8")}, tmp_path)
    expected = np.stack([px + 1.0, px + 2.0, px + 3.0])
    assert_close(out["y"], expected, rtol=0, atol=1e-4)


def test_grayscale_float16(tmp_path):
    from coremltools.proto import FeatureTypes_pb2
    b = image_model(1, 3, 4, scale=2.0, gray=-1.0)
    b.spec.description.input[0].type.imageType.colorSpace = FeatureTypes_pb2.ImageFeatureType.GRAYSCALE_FLOAT16
    values = rng(7).normal(size=(3, 4)) * 3
    out = predict(b, {"x": raw(values, "GRAY16F")}, tmp_path)
    expected = 2.0 * values.astype(np.float16).astype(np.float64) - 1.0
    assert_close(out["y"], expected[None], rtol=0, atol=1e-4)


def test_mean_image(tmp_path):
    b = image_model(3, 2, 3, preprocess=True)
    mean = rng(8).normal(size=(3, 2, 3)) * 40
    pre = b.spec.neuralNetwork.preprocessing[0]
    pre.meanImage.meanImage.extend(mean.reshape(-1).tolist())  # replaces the scaler (oneof)
    px = rng(9).integers(0, 256, size=(2, 3, 3), dtype=np.uint8)
    out = predict(b, {"x": raw(px, "RGB8")}, tmp_path)
    assert_close(out["y"], chw(px) - mean.astype(np.float32), rtol=0, atol=1e-4)


def test_mean_image_of_the_wrong_size_fails_the_load(tmp_path):
    b = image_model(3, 2, 3)
    b.spec.neuralNetwork.preprocessing[0].meanImage.meanImage.extend([1.0] * 5)
    err = load_error(b, tmp_path, rows=[{"x": raw(np.zeros((2, 3, 3), np.uint8), "RGB8")}])
    assert "'x'" in err and "mean image has 5 values" in err, err


def test_batch_of_rows_of_several_sizes(tmp_path):
    b = image_model(3, 4, 4, scale=0.5)
    pxs = [rng(10 + i).integers(0, 256, size=(4, 4, 3), dtype=np.uint8) for i in range(3)]
    big = rng(20).integers(0, 256, size=(8, 6, 3), dtype=np.uint8)
    rows = [{"x": raw(p, "RGB8")} for p in pxs] + [{"x": raw(big, "RGB8")}]
    out = predict(b, rows, tmp_path)
    for p, o in zip(pxs, out):
        assert_close(o["y"], 0.5 * chw(p), rtol=0, atol=1e-4)
    assert_close(out[3]["y"], 0.5 * chw(resize_reference(big, 4, 4, "centerCrop")), rtol=0, atol=0.5 + 1e-4)


# MARK: PNG and JPEG decoding

def png_cases():
    r = rng(30)
    rgb = r.integers(0, 256, size=(7, 9, 3), dtype=np.uint8)
    rgba = r.integers(0, 256, size=(7, 9, 4), dtype=np.uint8)
    gray = r.integers(0, 256, size=(7, 9), dtype=np.uint8)
    la = r.integers(0, 256, size=(7, 9, 2), dtype=np.uint8)
    pal = Image.fromarray(rgb, "RGB").quantize(colors=16)
    pal_t = pal.copy()
    pal_t.info["transparency"] = 3
    bits1 = Image.fromarray(gray > 128).convert("1")
    g16 = r.integers(0, 65536, size=(7, 9), dtype=np.uint16)
    rgb16 = r.integers(0, 65536, size=(7, 9, 3), dtype=np.uint16)
    rgba16 = r.integers(0, 65536, size=(7, 9, 4), dtype=np.uint16)
    scale16 = lambda v: np.floor(np.asarray(v, np.float64) / 257 + 0.5)
    return {
        # name: (PNG bytes, channels of the model, expected H×W×K pixels)
        "rgb": (pil_bytes(Image.fromarray(rgb, "RGB"), "PNG"), 3, rgb),
        "rgba": (pil_bytes(Image.fromarray(rgba, "RGBA"), "PNG"), 3, rgba[..., :3]),
        "gray": (pil_bytes(Image.fromarray(gray, "L"), "PNG"), 1, gray),
        "gray_alpha": (pil_bytes(Image.fromarray(la, "LA"), "PNG"), 1, la[..., 0]),
        "palette": (pil_bytes(pal, "PNG"), 3, np.asarray(pal.convert("RGB"))),
        "palette_trns": (pil_bytes(pal_t, "PNG", transparency=3), 3, np.asarray(pal.convert("RGB"))),
        "gray_1bit": (pil_bytes(bits1, "PNG"), 1, np.asarray(bits1.convert("L"))),
        "gray_16bit": (pil_bytes(Image.fromarray(g16, "I;16"), "PNG"), 1, scale16(g16)),
        "rgb_16bit": (png16(rgb16, 2), 3, scale16(rgb16)),
        "rgba_16bit": (png16(rgba16, 6), 3, scale16(rgba16[..., :3])),
        "rgb_interlaced": (png_interlaced(rgb), 3, rgb),
        "gray_into_rgb": (pil_bytes(Image.fromarray(gray, "L"), "PNG"), 3, np.repeat(gray[..., None], 3, axis=2)),
        "rgb_into_gray": (pil_bytes(Image.fromarray(rgb, "RGB"), "PNG"), 1, luma(rgb)),
    }


@pytest.mark.parametrize("case", sorted(png_cases()))
@pytest.mark.parametrize("how", ["path", "base64"])
def test_png_decoding(case, how, tmp_path):
    data, channels, expected = png_cases()[case]
    if case == "gray_16bit":
        assert Image.open(io.BytesIO(data)).mode in ("I;16", "I"), "the fixture must be a 16-bit PNG"
    if how == "path":
        f = tmp_path / "in.png"
        f.write_bytes(data)
        value = {"path": str(f)}
    else:
        value = b64(data)
    b = image_model(channels, 7, 9)
    out = predict(b, {"x": value}, tmp_path)
    assert_close(out["y"], chw(expected), rtol=0, atol=0, what=case)


@pytest.mark.parametrize("mode,progressive", [("RGB", False), ("L", False), ("RGB", True)])
@pytest.mark.parametrize("how", ["path", "base64"])
def test_jpeg_decoding_matches_pillow(mode, progressive, how, tmp_path):
    r = rng(40)
    h, w = 16, 24
    # A smooth picture plus noise: a realistic JPEG with chroma subsampling.
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 10, yy * 15, (xx + yy) * 6], axis=2) + r.integers(0, 40, size=(h, w, 3))
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    if mode == "L":
        img = img.convert("L")
    data = pil_bytes(img, "JPEG", quality=85, progressive=progressive)
    pillow = np.asarray(Image.open(io.BytesIO(data)).convert(mode))
    if how == "path":
        f = tmp_path / "in.jpg"
        f.write_bytes(data)
        value = {"path": str(f)}
    else:
        value = b64(data)
    b = image_model(3 if mode == "RGB" else 1, h, w)
    out = predict(b, {"x": value}, tmp_path)
    assert_close(out["y"], chw(pillow), rtol=0, atol=2, what=f"JPEG {mode}")


def test_relative_path_resolves_against_the_current_directory(tmp_path):
    px = rng(41).integers(0, 256, size=(3, 4, 3), dtype=np.uint8)
    (tmp_path / "pics").mkdir()
    Image.fromarray(px, "RGB").save(tmp_path / "pics" / "a.png")
    model = save(image_model(3, 3, 4), tmp_path)
    inp = tmp_path / "rows.jsonl"
    inp.write_text(json.dumps({"x": {"path": "pics/a.png"}}) + "\n")
    proc = subprocess.run(cortado_command() + ["predict", str(model), "--input", str(inp)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    y = json.loads(proc.stdout)["y"]
    assert_close(np.asarray(y["data"]).reshape(y["shape"]), chw(px), rtol=0, atol=0)


# MARK: resizing

SIZES = [(13, 9), (5, 4), (8, 20), (6, 6)]  # (width, height) of the image; the model takes 8 × 6


@pytest.mark.parametrize("mode", ["centerCrop", "scaleFit", "scaleFill"])
def test_crop_and_scale(mode, tmp_path):
    b = image_model(3, 6, 8)
    rows, refs = [], []
    for i, (w, h) in enumerate(SIZES):
        px = rng(50 + i).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        rows.append({"x": {**raw(px, "RGB8"), "cropAndScale": mode}})
        refs.append(resize_reference(px, 8, 6, mode))
    out = predict(b, rows, tmp_path)
    for (w, h), o, ref in zip(SIZES, out, refs):
        assert_close(o["y"], chw(ref), rtol=0, atol=1.0 + 1e-6, what=f"{mode} from {w}×{h}")
    if mode == "scaleFit":
        # 13×9 → 8×6: the picture is 8×6 (9 * 8/13 = 5.5 rounds to 6) … 5×4 → 8×6: 7.5 × 6 → 8×6.
        # 8×20 → 8×6: a 2×6 picture in the middle, zeros left and right.
        y = np.asarray(out[2]["y"]).reshape(3, 6, 8)
        assert np.all(y[:, :, :3] == 0) and np.all(y[:, :, 5:] == 0)


def test_crop_and_scale_defaults_to_center_crop_and_applies_to_png(tmp_path):
    px = rng(60).integers(0, 256, size=(10, 16, 3), dtype=np.uint8)
    b = image_model(3, 6, 8)
    data = pil_bytes(Image.fromarray(px, "RGB"), "PNG")
    out = predict(b, [{"x": b64(data)}, {"x": {**b64(data), "cropAndScale": "scaleFill"}}], tmp_path)
    assert_close(out[0]["y"], chw(resize_reference(px, 8, 6, "centerCrop")), rtol=0, atol=1.0 + 1e-6)
    assert_close(out[1]["y"], chw(resize_reference(px, 8, 6, "scaleFill")), rtol=0, atol=1.0 + 1e-6)


def test_gray_resize_and_gray16f_resize(tmp_path):
    from coremltools.proto import FeatureTypes_pb2
    px = rng(61).integers(0, 256, size=(9, 11), dtype=np.uint8)
    b = image_model(1, 6, 8)
    out = predict(b, {"x": {**raw(px, "GRAY8"), "cropAndScale": "scaleFill"}}, tmp_path)
    assert_close(out["y"], chw(resize_reference(px[..., None], 8, 6, "scaleFill")), rtol=0, atol=1.0 + 1e-6)
    b = image_model(1, 6, 8)
    b.spec.description.input[0].type.imageType.colorSpace = FeatureTypes_pb2.ImageFeatureType.GRAYSCALE_FLOAT16
    vals = rng(62).normal(size=(9, 11)).astype(np.float16).astype(np.float64)
    out = predict(b, {"x": {**raw(vals, "GRAY16F"), "cropAndScale": "scaleFill"}}, tmp_path)
    W, H = 11, 9
    x0, x1, tx = lerp_taps(8, 0, W, W)
    y0, y1, ty = lerp_taps(6, 0, H, H)
    top = vals[y0][:, x0] + tx * (vals[y0][:, x1] - vals[y0][:, x0])
    bottom = vals[y1][:, x0] + tx * (vals[y1][:, x1] - vals[y1][:, x0])
    ref = (top + ty[:, None] * (bottom - top)).astype(np.float16).astype(np.float64)
    assert_close(out["y"], ref[None], rtol=2e-3, atol=2e-3)


def test_enumerated_size_is_used_as_is(tmp_path):
    b = image_model(3, 6, 8)
    t = b.spec.description.input[0].type.imageType
    for w, h in [(8, 6), (5, 4)]:
        s = t.enumeratedSizes.sizes.add()
        s.width, s.height = w, h
    px = rng(63).integers(0, 256, size=(4, 5, 3), dtype=np.uint8)
    out = predict(b, {"x": raw(px, "RGB8")}, tmp_path)
    assert np.asarray(out["y"]).size == 3 * 4 * 5
    assert_close(out["y"], chw(px), rtol=0, atol=0)


# MARK: image outputs

def image_output_model(c, h, w, space):
    from coremltools.proto import FeatureTypes_pb2
    b = builder([("x", (c, h, w))], [("y", (c, h, w))])
    b.add_activation("identity", "LINEAR", "x", "y", params=[1.0, 0.0])
    t = b.spec.description.output[0].type
    t.imageType.width, t.imageType.height = w, h
    t.imageType.colorSpace = getattr(FeatureTypes_pb2.ImageFeatureType, space)
    return b


@pytest.mark.parametrize("space", ["RGB", "BGR", "GRAYSCALE"])
def test_image_output_as_png(space, tmp_path):
    c = 1 if space == "GRAYSCALE" else 3
    x = rng(70).uniform(-40, 300, size=(c, 5, 7))
    out = predict(image_output_model(c, 5, 7, space), {"x": x}, tmp_path)["y"]
    assert out["width"] == 7 and out["height"] == 5 and "data" not in out
    assert out["pixelFormat"] == ("GRAY8" if c == 1 else "RGB8")
    img = Image.open(io.BytesIO(base64.b64decode(out["png"])))
    expected = np.clip(np.floor(x + 0.5), 0, 255)
    if space == "BGR":
        expected = expected[::-1]
    assert img.mode == ("L" if c == 1 else "RGB")
    assert_close(chw(np.asarray(img)), expected, rtol=0, atol=0)


def test_grayscale_float16_output_is_raw(tmp_path):
    x = rng(71).normal(size=(1, 3, 4)) * 100
    out = predict(image_output_model(1, 3, 4, "GRAYSCALE_FLOAT16"), {"x": x}, tmp_path)["y"]
    assert out["pixelFormat"] == "GRAY16F" and "png" not in out
    # Written as the shortest Float text: equal once read back as float32.
    got = np.asarray(out["data"], dtype=np.float32)
    assert np.array_equal(got, x.astype(np.float16).astype(np.float32).reshape(-1)), got


def test_png_output_feeds_back_as_input(tmp_path):
    x = rng(72).integers(0, 256, size=(3, 4, 5)).astype(np.float64)
    out = predict(image_output_model(3, 4, 5, "RGB"), {"x": x}, tmp_path)["y"]
    back = predict(image_model(3, 4, 5), {"x": out}, tmp_path)  # overwrites the first model
    assert_close(back["y"], x, rtol=0, atol=0)


# MARK: errors

def test_corrupt_png(tmp_path):
    good = pil_bytes(Image.fromarray(rng(80).integers(0, 256, size=(6, 8, 3), dtype=np.uint8), "RGB"), "PNG")
    bad = bytearray(good)
    bad[40:60] = b"\x00" * 20  # inside IHDR/IDAT: a CRC mismatch
    model = save(image_model(3, 6, 8), tmp_path)
    err = failure(model, {"x": b64(bytes(bad))})
    assert "'x'" in err and "PNG" in err, err


def test_truncated_png(tmp_path):
    good = pil_bytes(Image.fromarray(rng(81).integers(0, 256, size=(6, 8, 3), dtype=np.uint8), "RGB"), "PNG")
    model = save(image_model(3, 6, 8), tmp_path)
    err = failure(model, {"x": b64(good[: len(good) // 2])})
    assert "'x'" in err and "PNG" in err, err


def test_truncated_jpeg(tmp_path):
    img = Image.fromarray(rng(82).integers(0, 256, size=(32, 32, 3), dtype=np.uint8), "RGB")
    data = pil_bytes(img, "JPEG", quality=90)
    f = tmp_path / "cut.jpg"
    f.write_bytes(data[: len(data) // 2])
    model = save(image_model(3, 32, 32), tmp_path)
    err = failure(model, {"x": {"path": str(f)}})
    assert "'x'" in err and "JPEG" in err and "cut.jpg" in err, err
    assert "Premature end" in err, err


def test_cmyk_jpeg_is_refused_clearly(tmp_path):
    img = Image.fromarray(rng(83).integers(0, 256, size=(8, 8, 3), dtype=np.uint8), "RGB").convert("CMYK")
    model = save(image_model(3, 8, 8), tmp_path)
    err = failure(model, {"x": b64(pil_bytes(img, "JPEG"))})
    assert "'x'" in err and "CMYK" in err, err


def test_missing_file(tmp_path):
    model = save(image_model(3, 6, 8), tmp_path)
    err = failure(model, {"x": {"path": str(tmp_path / "nope.png")}})
    assert "'x'" in err and "nope.png" in err and "does not exist" in err, err


def test_not_an_image_and_bad_options(tmp_path):
    model = save(image_model(3, 6, 8), tmp_path)
    err = failure(model, {"x": b64(b"GIF89a....")})
    assert "'x'" in err and "neither a PNG nor a JPEG" in err, err
    err = failure(model, {"x": {"base64": "%%%"}})
    assert "'x'" in err and "base64" in err, err
    px = raw(np.zeros((6, 8, 3), np.uint8), "RGB8")
    err = failure(model, {"x": {**px, "cropAndScale": "stretch"}})
    assert "'x'" in err and "cropAndScale" in err and "scaleFill" in err, err
