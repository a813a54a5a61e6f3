"""``dxgemm.bench.plot``: the roofline of ``python -m dxgemm bench --json`` draws each backend
under its own ceiling (no GPU: a result file made up here, matplotlib's Agg backend)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from dxgemm import bench  # noqa: E402

PEAKS = {"copy_gbps": 3000.0, "fma_tflops_float32": 63.0, "fma_tflops_float64": 33.0}


def _record(backend: str, dtype: str, size: int, tflops: float, **extra) -> dict:
    return dict(backend=backend, dtype=dtype, m=size, n=size, k=size, epilogue="none", ms=1.0, tflops=tflops,
                baseline="cublas", baseline_ms=1.0, baseline_tflops=50.0, ratio=tflops / 50.0, max_error_ratio=0.01,
                **extra)


def _doc(gpu: str = "NVIDIA H100 80GB HBM3") -> dict:
    records = [_record(b, d, s, t) for d in ("float32", "float64") for s in (1024, 2048, 4096)
               for b, t in (("naive", 1.0), ("warptile", 30.0), ("pipeline", 110.0 if d == "float32" else 45.0))]
    records.append(_record("tf32mma", "float32", 4096, 46.0))
    # records a plot must leave out: another suite without an epilogue field, an odd square, a fused epilogue
    records.append({"suite": "accuracy", "dtype": "float32", "backend": "auto", "m": 256, "n": 256, "k": 256})
    records.append(_record("warptile", "float64", 1000, 40.0))
    records.append(dict(_record("warptile", "float64", 4096, 40.0), epilogue="bias|gelu"))
    return {"gpu": {"name": gpu}, "peaks": dict(PEAKS), "records": records}


def test_roof_of_each_backend():
    assert bench.roof_of("pipeline", "float32") == "tf32x3"
    assert bench.roof_of("tf32mma", "float32") == "tf32x3"
    assert bench.roof_of("warptile", "float64") == "dmma"
    assert bench.roof_of("pipeline", "float64") == "dmma"
    assert bench.roof_of("warptile", "float32") == "fp32_simt"
    assert bench.roof_of("naive", "float64") == "fp64_simt"


def test_ceilings_measured_datasheet_and_unknown_gpu():
    sheet = bench.ceilings(PEAKS, "NVIDIA H100 80GB HBM3")
    assert sheet["fp32_simt"][0] == 63.0 and sheet["fp64_simt"][0] == 33.0
    assert sheet["dmma"][0] == bench.DATASHEET_TFLOPS["H100"]["dmma"] and "datasheet" in sheet["dmma"][1]
    assert sheet["tf32x3"][0] == pytest.approx(sheet["tf32"][0] / 3)
    measured = bench.ceilings({**PEAKS, "dmma_tflops": 65.1, "tf32_tflops": 374.0}, "NVIDIA H100 80GB HBM3")
    assert measured["dmma"][0] == 65.1 and "measured" in measured["dmma"][1]
    assert measured["tf32x3"][0] == pytest.approx(374.0 / 3)
    unknown = bench.ceilings(PEAKS, "Some Other GPU")
    assert set(unknown) == {"fp32_simt", "fp64_simt"}  # no tensor-core rate invented


def test_ladder_records_skip_other_suites_and_odd_shapes():
    """The plot's lines: power-of-two squares without an epilogue; odd squares, non-squares,
    fused chains and other suites' records (the accuracy suite's have no ``epilogue``) stay off."""
    kept = [_record("warptile", "float64", 1024, 1.0), _record("pipeline", "float64", 4096, 1.0)]
    dropped = [_record("pipeline", "float64", 1000, 1.0), _record("pipeline", "float64", 4097, 1.0),
               _record("warptile", "float64", 2048, 1.0) | {"epilogue": "bias|gelu"},
               _record("pipeline", "float64", 4096, 1.0, suite="fusion"),
               _record("warptile", "float64", 4096, 1.0) | {"n": 64},
               _record("warptile", "float32", 4096, 1.0, path="portable", device_as="L40S"),
               {"suite": "accuracy", "dtype": "float32", "backend": "auto", "m": 256, "n": 256, "k": 256}]
    assert bench.ladder_records({"records": kept + dropped}) == kept
    assert {r["m"] for r in bench.ladder_records(_doc())} == {1024, 2048, 4096}


def test_portable_records_kept_beside_native(tmp_path, monkeypatch):
    """A run under DXGEMM_DEVICE_AS is recorded as path 'portable' and replaces only its own
    earlier records, never the native ones of the same backend and shape."""
    from dxgemm import _info

    monkeypatch.delenv("DXGEMM_DEVICE_AS", raising=False)
    assert _info.path() == "native"
    monkeypatch.setenv("DXGEMM_DEVICE_AS", "l40s")
    assert _info.path() == "portable"
    path = tmp_path / "r.json"
    native = bench.Record("auto", "float32", 4096, 4096, 4096, "none", 1.0, 137.0, "cublas", 1.0, 50.0, 1.0, 0.1)
    old = bench.Record("auto", "float32", 4096, 4096, 4096, "none", 2.0, 68.0, "cublas", 1.0, 50.0, 0.5, 0.1,
                       "portable", "L40S")
    bench.save(str(path), [native, old], {})
    new = bench.Record("auto", "float32", 4096, 4096, 4096, "none", 3.0, 45.0, "cublas", 1.0, 50.0, 0.3, 0.1,
                       "portable", "L40S")
    bench.save(str(path), [new], {})
    records = json.loads(path.read_text())["records"]
    assert sorted((r["path"], r["ms"]) for r in records) == [("native", 1.0), ("portable", 3.0)]


def _drawn_labels(monkeypatch, doc, **kwargs) -> list[str]:
    """Every text the plot puts on its axes (annotations and legend entries)."""
    import matplotlib.figure

    labels: list[str] = []
    save = matplotlib.figure.Figure.savefig

    def spy(fig, path, *args, **kw):
        for ax in fig.axes:
            labels.extend(t.get_text() for t in ax.texts)
            labels.extend(ax.get_legend_handles_labels()[1])
        return save(fig, path, *args, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    return labels


@pytest.mark.parametrize("as_path", [True, False])
def test_plot_writes_png_with_every_ceiling(tmp_path, monkeypatch, as_path):
    doc = _doc()
    labels = _drawn_labels(monkeypatch, doc)
    png = tmp_path / "bench.png"
    src: object = doc
    if as_path:
        src = tmp_path / "bench.json"
        src.write_text(json.dumps(doc))
        src = str(src)
    bench.plot(src, str(png), peaks={"dmma_tflops": 65.1})
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = "\n".join(labels)
    for ceiling in ("FP32 SIMT FMA 63.0", "FP64 SIMT FMA 33.0", "FP64 tensor core (DMMA) 65.1 (measured",
                    "TF32 tensor core 494.7 (datasheet)", "3xTF32 = TF32 / 3: 165", "copy bandwidth 3000 GB/s"):
        assert ceiling in text, (ceiling, labels)
    assert "pipeline (roof 165)" in labels and "tf32mma (roof 165)" in labels  # float32: 3xTF32's ceiling
    assert "pipeline (roof 65)" in labels and "warptile (roof 65)" in labels  # float64: the DMMA ceiling
    assert "warptile (roof 63)" in labels and "naive (roof 33)" in labels  # SIMT rungs under the FMA rate
