"""python -m mpinn.bench"""
import sys

from mpinn.bench.cli import main

sys.exit(main())
