#!/usr/bin/env bash
# mypy over the three distributions as they import each other: `gangsolve`, `gangsolve.solver` and
# `gangsolve.bench` live in three folders (src/gangsolve, solver/, bench/) that setuptools maps into one
# namespace, a mapping mypy cannot read. So mypy reads a tree of symlinks laid out as the installed
# namespace, and its findings are printed with the repository's own paths.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/gangsolve"
for entry in src/gangsolve/*; do
  ln -s "$root/$entry" "$tree/gangsolve/"
done
ln -s "$root/solver" "$tree/gangsolve/solver"
ln -s "$root/bench" "$tree/gangsolve/bench"
status=0
(cd "$tree" && "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" -p gangsolve "$@") > "$tree/out" || status=$?
sed -e "s#^gangsolve/solver/#solver/#" -e "s#^gangsolve/bench/#bench/#" -e "s#^gangsolve/#src/gangsolve/#" "$tree/out"
exit $status
