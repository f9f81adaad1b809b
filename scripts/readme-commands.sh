#!/usr/bin/env bash
# Prints the commands of README.md's first ```sh block, one a line, without
# their comments: what a new user types first. CI runs them as written.
set -euo pipefail
cd "$(dirname "$0")/.."
awk '
  /^```sh$/ && !done { inside = 1; next }
  /^```/ && inside   { inside = 0; done = 1; next }
  inside {
    sub(/[[:space:]]+#.*$/, "")
    if ($0 != "") print
  }
' README.md
