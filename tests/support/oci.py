"""Helpers shared by the bundle tests and others (moved out of test_bundle.py)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

# --- system.tar: the docker archive as an OCI image layout ------------------------------------


def layer_tar(files: dict[str, bytes]) -> bytes:
    """An image layer: an uncompressed tar of these files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _add(tf: tarfile.TarFile, name: str, data: bytes | None = None, **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    for k, v in attrs.items():
        setattr(info, k, v)
    if data is not None:
        info.size = len(data)
    tf.addfile(info, io.BytesIO(data) if data is not None else None)


def docker_archive(path: Path, layers: list[bytes], *, diff_ids: list[str] | None = None,
                   ref: str = "envbuild-bundle/system:test",
                   extra: tuple[tuple[str, dict[str, object]], ...] = (),
                   manifest: object = None) -> str:
    """A docker archive as dockerd 20.10's `docker save` writes it (legacy format: <id>/layer.tar
    per layer, a layer seen twice as a symlink to the first, <config id>.json, manifest.json);
    returns the image id. `extra`: more members (name, TarInfo attributes) for hostile cases."""
    diff_ids = diff_ids or [_sha(layer) for layer in layers]
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": ["A=1"]},
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    image_id = _sha(config)
    seen: dict[str, str] = {}
    paths = []
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for i, layer in enumerate(layers):
            d = hashlib.sha256(f"v1-{i}".encode()).hexdigest()
            _add(tf, d, type=tarfile.DIRTYPE, mode=0o755)
            _add(tf, f"{d}/VERSION", b"1.0")
            if _sha(layer) in seen:
                _add(tf, f"{d}/layer.tar", type=tarfile.SYMTYPE,
                     linkname=f"../{seen[_sha(layer)]}/layer.tar")
            else:
                _add(tf, f"{d}/layer.tar", layer)
                seen[_sha(layer)] = d
            paths.append(f"{d}/layer.tar")
        _add(tf, f"{image_id[7:]}.json", config)
        for name, attrs in extra:
            data = attrs.pop("data", None)
            _add(tf, name, data if isinstance(data, bytes) else None, **attrs)
        if manifest is None:
            manifest = [{"Config": f"{image_id[7:]}.json", "RepoTags": [ref], "Layers": paths}]
        _add(tf, "manifest.json", json.dumps(manifest).encode())
    return image_id


def read_oci_layout(path: Path) -> dict[str, Any]:
    """Check an archive against the OCI image-layout and image-manifest rules, independently of
    envbuild's converter, and the docker-archive manifest.json it keeps: every blob's bytes
    hash to its name; index.json -> manifest -> config and layers by digest, media type and size;
    the layers are the config's diff_ids. Streamed (a real system.tar is hundreds of MB): blobs
    up to 1 MiB are kept. Returns the digests, the names and those blobs."""
    sizes: dict[str, int] = {}
    blobs: dict[str, bytes] = {}
    files: dict[str, bytes] = {}
    with tarfile.open(path) as tf:
        for m in tf:
            assert not m.issym() and not m.islnk(), m.name
            if m.isdir():
                assert m.name in ("blobs", "blobs/sha256"), m.name
                continue
            f = tf.extractfile(m)
            assert f is not None
            if m.name.startswith("blobs/sha256/"):
                digest, h, head = "sha256:" + m.name.rsplit("/", 1)[1], hashlib.sha256(), b""
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                    head = (head + chunk)[:1 << 20 | 1]
                assert "sha256:" + h.hexdigest() == digest, m.name
                sizes[digest] = m.size
                if m.size <= 1 << 20:
                    blobs[digest] = head
            else:
                files[m.name] = f.read()
    assert set(files) == {"oci-layout", "index.json", "manifest.json"}, set(files)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["schemaVersion"] == 2
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    [desc] = index["manifests"]
    assert desc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert desc["size"] == sizes[desc["digest"]]
    manifest = json.loads(blobs[desc["digest"]])
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == desc["mediaType"]
    cfg = manifest["config"]
    assert cfg["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert cfg["size"] == sizes[cfg["digest"]]
    config = json.loads(blobs[cfg["digest"]])
    for layer in manifest["layers"]:
        assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
        assert layer["size"] == sizes[layer["digest"]]
    layers = [la["digest"] for la in manifest["layers"]]
    assert config["rootfs"] == {"type": "layers", "diff_ids": layers}
    assert set(sizes) == {desc["digest"], cfg["digest"], *layers}  # nothing else, nothing less
    [image] = json.loads(files["manifest.json"])
    assert image["Config"] == f"blobs/sha256/{cfg['digest'][7:]}"
    assert image["Layers"] == [f"blobs/sha256/{d[7:]}" for d in layers]
    names = desc["annotations"]
    return {"manifest": desc["digest"], "config": cfg["digest"], "layers": layers,
            "name": names["io.containerd.image.name"],
            "ref_name": names["org.opencontainers.image.ref.name"],
            "repo_tags": image["RepoTags"], "blobs": blobs}

