"""The table and array formats, each read into Parts or a Dataset: CSV text (csvtext, tables), Parquet (tables),
click-log text (clicktext), the embedded click log (clicklog), .npz and .mat arrays (dense); a column's kind
(kinds) and a time column's parsing (times) as the readers decide them."""
