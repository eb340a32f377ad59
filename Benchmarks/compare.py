#!/usr/bin/env python3
"""Compares runs of the benchmark suite of two builds, figure by figure.

Each argument is the output directory of one `Benchmarks/suite.py` run (its suite.json).
Run the two builds in turns in one sitting (before, after, before, after, ...): the
spread between the runs of one build is the noise, and a figure whose ratio of medians
(after / before) lies outside it is marked.

    python3 Benchmarks/compare.py --before b1 b2 b3 --after a1 a2 a3
"""
import argparse
import json
import statistics
import sys


def figures(directory):
    with open(f"{directory}/suite.json") as f:
        suite = json.load(f)
    return {
        (figure["source"], figure["name"]): (figure["value"], figure.get("unit", ""))
        for figure in suite["figures"]
        if isinstance(figure.get("value"), (int, float))
    }


def spread(values):
    low, high = min(values), max(values)
    return high / low if low > 0 else 1.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", nargs="+", required=True, help="suite output directories of the first build")
    parser.add_argument("--after", nargs="+", required=True, help="suite output directories of the second build")
    parser.add_argument("--json", help="also write the comparison here")
    args = parser.parse_args()
    before = [figures(d) for d in args.before]
    after = [figures(d) for d in args.after]
    rows = []
    for key in before[0]:
        if not all(key in run for run in before + after):
            continue
        b = [run[key][0] for run in before]
        a = [run[key][0] for run in after]
        median_before, median_after = statistics.median(b), statistics.median(a)
        if median_before == 0:
            continue
        noise = max(spread(b), spread(a))
        ratio = median_after / median_before
        rows.append({
            "source": key[0], "name": key[1], "unit": before[0][key][1],
            "before": median_before, "after": median_after, "ratio": ratio,
            "noise": noise, "outside": not (1 / noise <= ratio <= noise),
        })
    print(f"{'source':22} {'figure':62} {'before':>11} {'after':>11} {'after/before':>12} {'noise':>7}")
    for row in rows:
        mark = "  outside the noise" if row["outside"] else ""
        print(f"{row['source'][:22]:22} {row['name'][:62]:62} {row['before']:11.4g} {row['after']:11.4g} "
              f"{row['ratio']:12.3f} {(row['noise'] - 1) * 100:6.1f}%{mark}")
    outside = [row for row in rows if row["outside"]]
    print(f"\n{len(rows)} figures; {len(outside)} outside the spread between runs of one build")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
