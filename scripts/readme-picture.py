#!/usr/bin/env python3
"""Make docs/img/result.png, the README's picture, from a mesh job's page.

The picture is two renders the job page (report/index.html, section "What the viewer loads")
already embeds: the tileset's root level and its leaves, decoded from the tile GLBs and drawn
flat-shaded at 320 × 320 px. This script takes them out of the page and puts them side by side,
pixel for pixel (no resampling), with Python's standard library only.

Usage, from the repository root (the Avocado sample is CC0; see docs/img/PROVENANCE.md):
    cargo run --release -- run datasets/jobs/avocado.toml    # writes out/avocado
    scripts/readme-picture.py out/avocado/report/index.html docs/img/result.png

Only 8-bit RGB, non-interlaced PNGs of equal height are handled, which is what the job page
writes; anything else stops with an error naming the image.
"""

import base64
import re
import struct
import sys
import zlib


def png_rows(data, name):
    """Decode an 8-bit RGB non-interlaced PNG into (width, height, rows of bytes)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{name}: not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = header
    if (depth, colour, interlace) != (8, 2, 0):
        sys.exit(f"{name}: expected 8-bit RGB, not interlaced; found {header}")
    stride, raw = width * 3, zlib.decompress(idat)
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: scripts/readme-picture.py REPORT_HTML OUT_PNG")
    page = open(sys.argv[1], encoding="utf-8").read()
    images = {
        alt: base64.b64decode(b64)
        for b64, alt in re.findall(r'src="data:image/png;base64,([^"]+)" alt="([^"]*)"', page)
    }
    leaves = [alt for alt in images if alt.startswith("leaves")]
    if "root" not in images or not leaves:
        sys.exit(f"{sys.argv[1]}: no 'root' and 'leaves' renders (a mesh job's page has them)")
    parts = [png_rows(images[alt], alt) for alt in ("root", leaves[0])]
    height = parts[0][1]
    if any(p[1] != height for p in parts):
        sys.exit("the two renders differ in height")
    raw = b"".join(b"\x00" + b"".join(p[2][y] for p in parts) for y in range(height))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", sum(p[0] for p in parts), height, 8, 2, 0, 0, 0)
    with open(sys.argv[2], "wb") as out:
        out.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr))
        out.write(chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    main()
