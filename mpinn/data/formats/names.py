"""What a data file's name says: its extension (a gzip-compressed text file's inner one) and whether it is
gzip-compressed. The one place both are decided; mpinn.data.files.data_format adds the first line's word."""
import os

TEXT_EXTS = (".csv", ".txt", ".tsv", ".tab")        # tab-separated values read as CSV (csvtext.separator)
TABLE_EXTS = TEXT_EXTS + (".parquet", ".pq")
FORMATS = {".csv": "csv", ".txt": "csv", ".tsv": "csv", ".tab": "csv", ".parquet": "parquet", ".pq": "parquet",
           ".npz": "npz", ".mat": "mat", ".mpinn": "mpinn"}
TABLES = ("csv", "parquet", "criteo")       # the formats read as tables, in chunks (and so streamed)


def gzipped(path):
    """Is the file gzip-compressed? Its name says so (.gz, any case); a compressed file under a plain name is
    refused by its reader (csvtext.compressed_as)."""
    return str(path).lower().endswith(".gz")


def extension(path):
    """A data file's extension, lower case; a gzip-compressed text file's (.csv.gz, .txt.gz) is its inner one."""
    base, ext = os.path.splitext(str(path).lower())
    if ext == ".gz" and os.path.splitext(base)[1] in TEXT_EXTS:
        return os.path.splitext(base)[1]
    return ext
