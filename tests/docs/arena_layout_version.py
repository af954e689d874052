#!/usr/bin/env python3
"""docs/arena.md names the layout version the code writes, in both places.

  arena_layout_version.py SOURCE_DIR

The page says "describes layout version **N**" and its ArenaHeader table gives
`layout_version` as `N`; src/shm/arena_layout.hpp has kLayoutVersion = N. A
layout change bumps the constant; this fails until the page follows (the table
once still said 12 after the bump to 13, found by a docs review).
"""
import re
import sys


def main():
    source = sys.argv[1]
    header = open(f"{source}/src/shm/arena_layout.hpp", encoding="utf-8").read()
    page = open(f"{source}/docs/arena.md", encoding="utf-8").read()
    code = re.search(r"kLayoutVersion\s*=\s*(\d+)", header)
    prose = re.search(r"describes layout version \*\*(\d+)\*\*", page)
    table = re.search(r"\|\s*`layout_version`\s*\|[^|]*\|\s*`(\d+)`\s*\|", page)
    found = {"src/shm/arena_layout.hpp kLayoutVersion": code,
             "docs/arena.md 'describes layout version'": prose,
             "docs/arena.md ArenaHeader table's layout_version": table}
    missing = [name for name, match in found.items() if match is None]
    if missing:
        print("not found: " + "; ".join(missing))
        return 1
    values = {name: int(match.group(1)) for name, match in found.items()}
    if len(set(values.values())) != 1:
        print("layout versions differ: " + "; ".join(f"{name} = {v}" for name, v in values.items()))
        return 1
    print(f"layout version {code.group(1)} in all three places")
    return 0


if __name__ == "__main__":
    sys.exit(main())
