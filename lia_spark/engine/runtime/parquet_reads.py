"""Parquet files read by pyarrow with the CRC of every page verified, as Spark's readers verify them
(:func:`lia_spark.engine.spark.session.checksummed_parquet`): a damaged page raises
:class:`lia_spark.run.failures.DamagedFileError` naming the file, in a Spark Python worker as on the driver, instead
of handing changed values to the stage."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import pandas as pd
import pyarrow as pa

from lia_spark.run.failures import DamagedFileError, damaged_line, error_first_line


@contextlib.contextmanager
def named_damage(path: str) -> Iterator[None]:
    """Inside the block, pyarrow's failure to read the Parquet file at ``path`` (a page CRC that does not match,
    bytes that do not decode) raises :class:`DamagedFileError` naming it; a missing or unreadable file (an
    ``OSError`` with an errno) passes as it is."""
    try:
        yield
    except (OSError, pa.ArrowException) as error:
        if isinstance(error, OSError) and error.errno is not None:
            raise
        raise DamagedFileError(damaged_line(path, error_first_line(error))) from error


def verified_batches(path: str, *, columns: Sequence[str], row_groups: Sequence[int], batch_size: int
                     ) -> Iterator[pa.RecordBatch]:
    """The ``columns`` of the ``row_groups`` of the Parquet file ``path`` in batches of at most ``batch_size`` rows,
    every page's CRC verified."""
    import pyarrow.parquet as pq

    with named_damage(path):
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
        yield from parquet.iter_batches(batch_size=batch_size, columns=list(columns), row_groups=list(row_groups),
                                        use_threads=False)


def verified_row_groups(path: str, *, columns: Sequence[str], **options: Any) -> Iterator[pa.Table]:
    """The ``columns`` of each row group of the Parquet file ``path`` in turn (``options``: of
    ``pyarrow.parquet.ParquetFile``), every page's CRC verified."""
    import pyarrow.parquet as pq

    with named_damage(path):
        parquet = pq.ParquetFile(path, page_checksum_verification=True, **options)
        for group in range(parquet.num_row_groups):
            yield parquet.read_row_group(group, columns=list(columns))


def verified_frame(folder: str) -> pd.DataFrame:
    """The Parquet files of the local ``folder`` (hidden ones skipped, as Spark's and pandas' readers do) as one
    DataFrame, every page's CRC verified."""
    import pyarrow.dataset as ds

    verifying = ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True))
    dataset = ds.dataset(folder, format=verifying)
    tables = []
    for fragment in dataset.get_fragments():
        with named_damage(fragment.path):
            tables.append(fragment.to_table(schema=dataset.schema))
    return (pa.concat_tables(tables) if tables else dataset.schema.empty_table()).to_pandas()
