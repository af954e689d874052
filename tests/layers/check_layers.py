#!/usr/bin/env python3
"""Each src/ folder uses only the folders below it (README, "How it works").

Reads every #include "..." of src/ and launcher/, maps it to the layer of the
file it names (a src/ folder, or for public headers the layer that implements
them) and fails, naming the file and the include, when an arrow points up.
"""
import pathlib
import re
import sys

ORDER = ["base", "kernels", "shm", "collectives", "backends", "mpi", "group", "nn", "ddp",
         "torch"]
RANK = {name: i for i, name in enumerate(ORDER)}
# Public headers belong to the layer whose folder implements them.
PUBLIC = {
    "cxx20": "base", "dtype": "base", "error": "base", "tensor": "base",
    "backend": "backends", "arena_backend": "backends", "mock_backend": "backends",
    "shm_backend": "backends", "store_backend": "backends",
    "mpi_backend": "mpi",
    "process_group": "group", "world": "group", "comm": "group",
    "bucket": "ddp", "grad_sync": "ddp", "ddp": "ddp",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_include(path):
    parts = path.split("/")
    if parts[0] == "axonml":
        if parts[1] == "distributed.hpp":
            return "ddp"  # the prelude names everything up to DDP
        if parts[1] == "nn.hpp" or parts[1] == "nn":
            return "nn"
        if parts[1] == "torch":
            return "torch"
        if parts[1] == "distributed":
            return PUBLIC.get(pathlib.Path(parts[2]).stem)
        return None
    return parts[0] if parts[0] in RANK else None


def main(root):
    root = pathlib.Path(root)
    problems = []
    unknown = []
    for source in sorted((root / "src").rglob("*")):
        if source.suffix not in (".hpp", ".cpp"):
            continue
        layer = source.relative_to(root / "src").parts[0]
        if layer not in RANK:
            unknown.append(str(source.relative_to(root)))
            continue
        for included in INCLUDE.findall(source.read_text()):
            target = layer_of_include(included)
            if target is None and included.startswith("axonml/"):
                unknown.append(f"{source.relative_to(root)}: {included}")
            if target is not None and RANK[target] > RANK[layer]:
                problems.append(f"{source.relative_to(root)} ({layer}) includes {included} ({target})")
    # Public headers sit in the layer that implements them.
    for header in sorted((root / "include" / "axonml").rglob("*.hpp")):
        layer = layer_of_include(str(header.relative_to(root / "include")))
        if layer is None:
            unknown.append(str(header.relative_to(root)))
            continue
        for included in INCLUDE.findall(header.read_text()):
            target = layer_of_include(included)
            if target is not None and RANK[target] > RANK[layer]:
                problems.append(f"{header.relative_to(root)} ({layer}) includes {included} ({target})")
    # The launcher sits beside the library and may use only its lowest layers.
    for source in sorted((root / "launcher").glob("*.[ch]pp")):
        for included in INCLUDE.findall(source.read_text()):
            target = layer_of_include(included)
            if target is not None and RANK[target] > RANK["shm"]:
                problems.append(f"{source.relative_to(root)} (launcher) includes {included} ({target})")
    for line in unknown:
        print(f"layers: not in the layer list (add it to tests/layers/check_layers.py): {line}")
    for line in problems:
        print(f"layers: upward include: {line}")
    if problems or unknown:
        return 1
    print(f"layers: every include of src/ and launcher/ points down ({' -> '.join(ORDER)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
