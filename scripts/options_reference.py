"""Write (or check) docs/options.md, the option reference, from the one table the parser is made from
(mpinn/settings/table.py), the defaults by model shape and the rule table. Run by its path (docs/options.md
names it so) or as python -m scripts.options_reference; it needs mpinn installed (pip install -e .)."""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "options.md")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="write docs/options.md (default: print it)")
    p.add_argument("--check", action="store_true", help="exit 1 if docs/options.md is not up to date")
    args = p.parse_args(argv)
    from mpinn.settings.parse import reference_markdown
    text = reference_markdown()
    if args.check:
        with open(PAGE) as f:
            same = f.read() == text
        print("docs/options.md is %s" % ("up to date" if same else "out of date: python scripts/options_reference.py --write"))
        return 0 if same else 1
    if args.write:
        os.makedirs(os.path.dirname(PAGE), exist_ok=True)
        with open(PAGE, "w") as f:
            f.write(text)
        print("wrote %s" % PAGE)
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
