"""python -m mpinn.bench.tour [--out DIR]: the small click table the README's tour and the guide train on, made here
(deterministic, seeded): clicks.csv (3000 rows, days 1-20), clicks-valid.csv (600 rows, days 21-24) and
clicks-test.csv (600 rows, days 25-30). Columns: clicked (0/1), site, ad, device (categorical), price, age
(numeric), day; the click is drawn from a logistic model of site, ad, device and the price's log."""
import argparse
import os

import numpy as np

FILES = (("clicks.csv", 3000, (1, 21)), ("clicks-valid.csv", 600, (21, 25)), ("clicks-test.csv", 600, (25, 31)))
DEVICES = ("phone", "tablet", "desktop")


def write_tour_files(out_dir, seed=0):
    """The tour's three files in out_dir (made if missing); returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for name, n, days in FILES:
        site, ad, device = rng.integers(0, 40, n), rng.integers(0, 200, n), rng.integers(0, 3, n)
        price, age = rng.lognormal(3, 1, n), rng.integers(18, 80, n)
        logit = np.sin(site) + 0.01 * (ad % 50) - 0.5 * device + 0.2 * np.log(price) - 1.0
        clicked = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
        day = rng.integers(*days, n)
        path = os.path.join(out_dir, name)
        with open(path, "w") as f:
            f.write("clicked,site,ad,device,price,age,day\n")
            for i in range(n):
                f.write("%d,s%d,a%d,%s,%.2f,%d,%d\n" % (clicked[i], site[i], ad[i], DEVICES[device[i]], price[i],
                                                      age[i], day[i]))
        paths.append(path)
    return paths


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mpinn.bench.tour", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=".", help="the directory to write them in (default: here)")
    args = p.parse_args(argv)
    for path in write_tour_files(args.out):
        print("wrote %s" % path)


if __name__ == "__main__":
    main()
