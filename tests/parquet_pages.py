"""The pages of a Parquet file, read from its bytes (tests and benchmarks/fault_matrix.py): where each column
chunk's pages lie (the footer's column chunk offsets), whether each page header carries a CRC and whether it
matches, and bit flips inside one column's page data that keep the file's size (with Hadoop's ``.crc`` beside the
file recomputed or removed).

A page is a Thrift PageHeader (compact protocol; Parquet's format spec: 1 type, 2 uncompressed size, 3 compressed
size, 4 crc, ...) followed by ``compressed size`` bytes of page data; the CRC is CRC-32 of those bytes.
"""
from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path

import pyarrow.parquet as pq

DICTIONARY_PAGE = 2  # PageType.DICTIONARY_PAGE; 0 DATA_PAGE, 3 DATA_PAGE_V2
HADOOP_CRC_MAGIC = b"crc\x00"


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a column chunk: the column, the page type, where its data lies, its stored CRC (None: none)."""

    column: str
    row_group: int
    type: int
    data_offset: int
    data_size: int
    crc: int | None

    def crc_matches(self, data: bytes) -> bool:
        """Whether the stored CRC is CRC-32 of the page's data in the file's bytes ``data``."""
        page = data[self.data_offset:self.data_offset + self.data_size]
        return self.crc is not None and (self.crc & 0xFFFFFFFF) == zlib.crc32(page)


class _Compact:
    """A reader of Thrift's compact protocol over ``data`` from ``position``."""

    def __init__(self, data: bytes, position: int) -> None:
        self.data, self.position = data, position

    def byte(self) -> int:
        value = self.data[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def fields(self) -> dict[int, object]:
        """The fields of one struct (nested structs and containers skipped: their value is None)."""
        found, field_id = {}, 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == 0:
                return found
            delta = header >> 4
            field_id = field_id + delta if delta else self.zigzag()
            found[field_id] = self.value(kind)

    def value(self, kind: int) -> object:
        if kind in (1, 2):  # booleans in a field header
            return kind == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            self.position += 8
            return None
        if kind == 8:
            size = self.varint()
            self.position += size
            return None
        if kind in (9, 10):
            header = self.byte()
            size = header >> 4 if header >> 4 != 15 else self.varint()
            for _ in range(size):
                self.element(header & 0x0F)
            return None
        if kind == 11:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.element(types >> 4)
                self.element(types & 0x0F)
            return None
        if kind == 12:
            self.fields()
            return None
        raise ValueError(f"unknown Thrift compact type {kind} at byte {self.position}")

    def element(self, kind: int) -> None:
        if kind in (1, 2):  # a boolean inside a container is one byte
            self.position += 1
        else:
            self.value(kind)


def pages(path: Path) -> list[Page]:
    """Every page of every column chunk of the Parquet file at ``path``, in file order."""
    data = path.read_bytes()
    metadata = pq.ParquetFile(path).metadata
    found = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and chunk.dictionary_page_offset:
                start = min(start, chunk.dictionary_page_offset)
            position, end = start, start + chunk.total_compressed_size
            while position < end:
                reader = _Compact(data, position)
                header = reader.fields()
                size = int(header[3])
                found.append(Page(chunk.path_in_schema, group, int(header[1]), reader.position, size,
                                  None if 4 not in header else int(header[4])))
                position = reader.position + size
    return found


def flip_in_column(path: Path, column: str, *, crc: str = "recompute", at: float = 0.5, bit: int = 0) -> Page:
    """Flip bit ``bit`` of the byte at fraction ``at`` of the data of ``column``'s first data page (dictionary pages
    skipped) in the Parquet file ``path``: its size stays. Hadoop's ``.<name>.crc`` beside it is
    then recomputed over the new bytes (``crc="recompute"``) or removed (``crc="remove"``), so only the page's own
    CRC can tell. Returns the page."""
    page = [page for page in pages(path) if page.column == column and page.type != DICTIONARY_PAGE][0]
    data = bytearray(path.read_bytes())
    data[page.data_offset + min(int(page.data_size * at), page.data_size - 1)] ^= 1 << bit
    path.write_bytes(bytes(data))
    hadoop_crc = path.with_name(f".{path.name}.crc")
    if hadoop_crc.exists():
        if crc == "remove":
            hadoop_crc.unlink()
        else:
            hadoop_crc.write_bytes(hadoop_checksums(bytes(data), _bytes_per_checksum(hadoop_crc.read_bytes())))
    return page


def _bytes_per_checksum(crc_file: bytes) -> int:
    if not crc_file.startswith(HADOOP_CRC_MAGIC):
        raise ValueError("not a Hadoop checksum file")
    return int.from_bytes(crc_file[4:8], "big")


def hadoop_checksums(data: bytes, bytes_per_checksum: int = 512) -> bytes:
    """The content of Hadoop's ``.crc`` file (ChecksumFileSystem) for a file holding ``data``: the magic, the chunk
    size, then CRC-32 of each chunk, big-endian."""
    sums = b"".join(zlib.crc32(data[start:start + bytes_per_checksum]).to_bytes(4, "big")
                    for start in range(0, len(data), bytes_per_checksum))
    return HADOOP_CRC_MAGIC + bytes_per_checksum.to_bytes(4, "big") + sums
