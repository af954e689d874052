#!/usr/bin/env python3
"""Every file path that README.md and docs/*.md name exists.

  doc_paths.py SOURCE_DIR [BUILD_DIR]

Looks in code spans, code blocks and link targets for words that start with
one of the repository's top-level folders or files (src/, include/, tests/,
docs/, README.md, ...) and checks each in SOURCE_DIR: a path ending in "/" must
be a folder, one with "*" must match something, "…" ends a path (the rest is
left to the reader). A link target is relative to its document. Paths in the
build tree ("build/release/...") are checked in BUILD_DIR, when given, as
long as that build has the folder they lie in (an ASan build has no
benchmarks) and, for the PyTorch backend's files, the backend. Exits 1 listing every path that does not exist, with its line.
"""
import glob
import os
import re
import sys

TOP = ("src/", "include/", "tests/", "docs/", "benchmarks/", "examples/", "launcher/", "scripts/",
       "cmake/", ".ci/", "build/")
TOP_FILES = ("README.md", "CMakeLists.txt", "CMakePresets.json", "Makefile", ".gitignore")
CODE_SPAN = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
WORD = re.compile(r"[A-Za-z0-9_.*/…<>+-]+")


def candidates(text, in_build):
    """Path-like words of one piece of code or prose. A word starting with
    "./", or any word after `cd build/...` in a code block, is relative to
    the build tree, where the commands are run from."""
    for word in WORD.findall(text):
        word = word.split("…")[0].rstrip(".,;:")
        if word.startswith("./") or (in_build and not word.startswith("build/")):
            word = "build/release/" + word.removeprefix("./")
        if word.startswith(TOP) or word in TOP_FILES:
            if "<" in word or ">" in word:
                word = word[: min(i for i in (word.find("<"), word.find(">")) if i >= 0)]
                word = word[: word.rfind("/") + 1]
            if word:
                yield word


def exists(root, path):
    full = os.path.join(root, path)
    if "*" in path:
        return bool(glob.glob(full))
    if path.endswith("/"):
        return os.path.isdir(full)
    return os.path.exists(full)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    source = os.path.abspath(sys.argv[1])
    build = os.path.abspath(sys.argv[2]) if len(sys.argv) == 3 else None
    has_torch = build is not None and os.path.isdir(os.path.join(build, "python", "axonml_torch"))
    docs = [os.path.join(source, "README.md")] + sorted(glob.glob(os.path.join(source, "docs", "*.md")))
    missing, checked = [], 0
    for doc in docs:
        rel_doc = os.path.relpath(doc, source)
        in_block = in_build = False
        for number, line in enumerate(open(doc, encoding="utf-8"), 1):
            if line.startswith("```"):
                in_block = not in_block
                in_build = False
                continue
            if in_block and re.match(r"^\s*cd build/", line):
                in_build = True
                continue
            pieces = [line] if in_block else CODE_SPAN.findall(line)
            found = [(p, source) for piece in pieces for p in candidates(piece, in_block and in_build)]
            for target in LINK.findall(line):
                if not re.match(r"^[a-z]+:", target) and not target.startswith("#"):
                    found.append((target.split("#")[0], os.path.dirname(doc)))
            for path, root in found:
                if path.startswith("build/"):
                    parts = path.split("/")
                    if build is None or len(parts) < 3 or not os.path.isdir(os.path.join(build, parts[2])):
                        continue
                    path, root = "/".join(parts[2:]), build
                    if not has_torch and ("torch" in path or path.startswith("python/")):
                        continue  # a build without the PyTorch backend (sanitizer builds)
                checked += 1
                if not exists(root, path):
                    missing.append(f"{rel_doc}:{number}: {path} does not exist"
                                   + (" in the build tree" if root == build else ""))
    if checked == 0:
        sys.exit("doc_paths: found no paths at all; the pattern is broken")
    for m in missing:
        print(m)
    print(f"doc_paths: {checked} path mentions checked, {len(missing)} missing")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
