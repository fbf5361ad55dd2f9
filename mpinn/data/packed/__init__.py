"""Packed data (python -m mpinn.prepare): the file format and its memory-mapped reader (format), its checksummed
meta (meta), the writers (writing, packer; pack_parts for a multi-part set) and the parts read as one (parts)."""
