#!/usr/bin/env python3
"""Keeps README.md true by running what it shows, taken from README.md itself.

  readme_snippets.py generate README OUT_CPP
      Writes one C++ translation unit holding every ```cpp block of README:
      a block with #include lines is the prelude (copied to the top, as a
      reader would write it); every other block becomes the body of its own
      function, called from main() on a world of one (World::mock()) with
      `world`, `pg` (its default group) and `batches` (a few input/target
      pairs for nn::Linear(10, 5)) in scope. #line directives make compiler
      errors point at README's lines.

  readme_snippets.py shell README --source-dir S --build-dir B [--mpi] [--torch]
      Runs every ```sh block with bash (-e -o pipefail) from the repository
      root S, with HOME set to a scratch directory, "build/release" in the
      commands standing for the build tree B under test. Prints each block's
      output; exits 1 naming README's line of the first block that fails.

Markers: an HTML comment on the line right before a block's fence says how to
treat it; anything else there is an error, so a typo cannot skip a block.
  <!-- readme-test: skip: REASON -->          neither compiled nor run
  <!-- readme-test: compile only: REASON -->  (cpp) compiled, not called
  <!-- readme-test: needs mpi -->             (sh) run only in a build with MPI
  <!-- readme-test: needs torch -->           (sh) run only in a build with the
                                              PyTorch backend (AXON_WITH_TORCH)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->\s*$")


class Block:
    def __init__(self, lang, first_line, lines, marker):
        self.lang = lang              # the fence's info string, e.g. "cpp"
        self.first_line = first_line  # README line number of the first code line
        self.lines = lines
        self.marker = marker          # (kind, reason) or None

    @property
    def text(self):
        return "".join(self.lines)


def parse_marker(text, path, line):
    if text.startswith("skip:") and text[5:].strip():
        return ("skip", text[5:].strip())
    if text.startswith("compile only:") and text[13:].strip():
        return ("compile only", text[13:].strip())
    if text in ("needs mpi", "needs torch"):
        return (text, "")
    sys.exit(f"{path}:{line}: unknown readme-test marker '{text}' "
             "(skip: REASON | compile only: REASON | needs mpi | needs torch)")


def blocks(path):
    with open(path, encoding="utf-8") as f:
        all_lines = f.readlines()
    found, i = [], 0
    while i < len(all_lines):
        fence = re.match(r"^```(\S*)\s*$", all_lines[i])
        if not fence:
            i += 1
            continue
        marker = None
        if i > 0:
            m = MARKER.match(all_lines[i - 1].strip())
            if m:
                marker = parse_marker(m.group(1), path, i)
        j = i + 1
        while j < len(all_lines) and not all_lines[j].startswith("```"):
            j += 1
        if j == len(all_lines):
            sys.exit(f"{path}:{i + 1}: code block never closed")
        found.append(Block(fence.group(1), i + 2, all_lines[i + 1:j], marker))
        i = j + 1
    # A marker that is not right before a fence is a mistake too.
    for n, line in enumerate(all_lines):
        if MARKER.match(line.strip()) and not (n + 1 < len(all_lines) and all_lines[n + 1].startswith("```")):
            sys.exit(f"{path}:{n + 1}: readme-test marker is not on the line right before a code block")
    return found


def generate(readme, out):
    readme_abs = os.path.abspath(readme)
    cpp = [b for b in blocks(readme) if b.lang == "cpp" and not (b.marker and b.marker[0] == "skip")]
    prelude = [b for b in cpp if re.search(r"^\s*#include", b.text, re.M)]
    fragments = [b for b in cpp if b not in prelude]
    if not prelude or not fragments:
        sys.exit(f"{readme}: expected a ```cpp prelude (with #include) and ```cpp snippets")
    src = [
        "// Generated from README.md by tests/docs/readme_snippets.py; do not edit.\n",
        "// The snippets get nothing but the README's prelude and `batches`: a header\n",
        "// they need and the prelude lacks fails here, as it would for a reader\n",
        "// (found by a review: <cassert> and <iostream> came from this file).\n",
    ]
    for b in prelude:
        src.append(f'#line {b.first_line} "{readme_abs}"\n')
        src.append(b.text)
    src.append("\n@@BACK_TO_THIS_FILE@@\n")
    src.append("namespace readme_snippets {\n")
    src.append("using Batches = std::vector<std::pair<Tensor, Tensor>>;\n\n")
    calls = []
    for k, b in enumerate(fragments):
        src.append("[[maybe_unused]] static void snippet_%d([[maybe_unused]] World& world, "
                   "[[maybe_unused]] ProcessGroup& pg, [[maybe_unused]] const Batches& batches) {\n  {\n" % k)
        src.append(f'#line {b.first_line} "{readme_abs}"\n')
        src.append(b.text)
        src.append("@@BACK_TO_THIS_FILE@@\n  }\n}\n\n")
        if not b.marker:
            calls.append((k, b.first_line))
    src.append("}  // namespace readme_snippets\n\n")
    src.append("#include <cstdio>\n#include <exception>\n\n")
    src.append("int main() {\n  using namespace readme_snippets;\n")
    src.append("  int failed = 0;\n")
    for k, line in calls:
        src.append("  try {\n")
        src.append("    World world = World::mock();\n    ProcessGroup pg = world.default_group();\n")
        src.append("    Batches batches{{Tensor::full({4, 10}, 0.5f), Tensor::full({4, 5}, 0.25f)},\n"
                   "                    {Tensor::full({4, 10}, -0.5f), Tensor::full({4, 5}, 1.0f)}};\n")
        src.append(f"    snippet_{k}(world, pg, batches);\n")
        src.append(f'    std::printf("README.md:{line}: ran\\n");\n')
        src.append("  } catch (const std::exception& e) {\n")
        src.append(f'    std::printf("README.md:{line}: FAILED: %s\\n", e.what());\n    failed = 1;\n  }}\n')
    src.append('  std::printf("%s\\n", failed ? "some README snippets failed" : "all README snippets ran");\n')
    src.append("  return failed;\n}\n")
    # Code after a snippet is this file's again, for compiler messages.
    out_abs = os.path.abspath(out)
    lines = "".join(src).splitlines(True)
    text = "".join(f'#line {n + 2} "{out_abs}"\n' if l.startswith("@@BACK_TO_THIS_FILE@@") else l
                   for n, l in enumerate(lines))
    # Rewrite only on change, so that make rebuilds only after README edits.
    if not os.path.exists(out) or open(out, encoding="utf-8").read() != text:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)


def shell(readme, source_dir, build_dir, have_mpi, have_torch):
    source_dir = os.path.abspath(source_dir)
    build_dir = os.path.abspath(build_dir)
    rel = os.path.relpath(build_dir, source_dir)
    build_ref = rel if not rel.startswith("..") else build_dir
    ran = 0
    for b in blocks(readme):
        if b.lang != "sh":
            continue
        where = f"README.md:{b.first_line}"
        if b.marker and b.marker[0] == "skip":
            print(f"{where}: skipped ({b.marker[1]})")
            continue
        if b.marker and b.marker[0] == "needs mpi" and not have_mpi:
            print(f"{where}: skipped (this build has no MPI)")
            continue
        if b.marker and b.marker[0] == "needs torch" and not have_torch:
            print(f"{where}: skipped (this build has no PyTorch backend)")
            continue
        script = b.text.replace("build/release", build_ref)
        with tempfile.TemporaryDirectory(prefix="readme-home-") as home:
            env = dict(os.environ, HOME=home)
            started = time.monotonic()
            print(f"{where}: running\n" + "".join("    $ " + l for l in script.splitlines(True)), flush=True)
            try:
                done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=source_dir, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                sys.exit(f"{where}: FAILED: still running after 600 s")
            tail = done.stdout[-4000:]
            print("".join("    | " + l for l in tail.splitlines(True)))
            if done.returncode != 0:
                sys.exit(f"{where}: FAILED with exit status {done.returncode} (output above)")
            print(f"{where}: ok in {time.monotonic() - started:.1f} s", flush=True)
            ran += 1
    if ran == 0:
        sys.exit("README.md: no ```sh block ran; the test would prove nothing")
    print(f"all {ran} runnable README shell blocks passed")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    g = sub.add_parser("generate")
    g.add_argument("readme")
    g.add_argument("out")
    s = sub.add_parser("shell")
    s.add_argument("readme")
    s.add_argument("--source-dir", required=True)
    s.add_argument("--build-dir", required=True)
    s.add_argument("--mpi", action="store_true")
    s.add_argument("--torch", action="store_true")
    a = p.parse_args()
    if a.mode == "generate":
        generate(a.readme, a.out)
    else:
        shell(a.readme, a.source_dir, a.build_dir, a.mpi, a.torch)


if __name__ == "__main__":
    main()
