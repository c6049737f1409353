#!/usr/bin/env bash
# Prints the interpreter the Makefile makes the venv with (its PY, unless PY is given): the
# fastest CPython 3.11 on this machine (constraints.txt is locked on 3.11), else python3.
#
# Builds of one version differ in speed: Debian's python3.11 is built with profile-guided and
# link-time optimisation, pyenv's default build is not: on pyenv's the test suite takes ~20%
# longer and fastmode spends 7-10% more CPU per streamed token (docs/development.md). How a
# build was compiled is not reliably on record (Debian's sysconfig describes its shared
# library's build, not the optimised interpreter's), so each candidate runs the same small
# workload of calls, attribute reads and dict lookups, best of 5 rounds; the quickest is taken.
set -u

workload='import ensurepip, sys, timeit  # (python -m venv needs ensurepip: python3-venv on Debian)
if sys.version_info[:2] != (3, 11):
    sys.exit(1)
class Box:
    def __init__(self, x):
        self.x = x
    def add(self, y):
        return self.x + y
def work(n=3000):
    total = 0
    for i in range(n):
        b = Box(i)
        total += b.add(i) + {"k": i}.get("k", 0)
    return total
print(min(timeit.repeat(work, number=20, repeat=5)))'

candidates=()
while IFS= read -r path; do candidates+=("$path"); done < <(type -ap python3.11)
for path in /usr/bin/python3.11 /usr/local/bin/python3.11; do
  [ -x "$path" ] && candidates+=("$path")
done

best="" best_s=""
declare -A timed=()
for path in "${candidates[@]}"; do
  real=$(readlink -f "$path")  # /bin/python3.11 and /usr/bin/python3.11 are one binary
  [ -n "${timed[$real]:-}" ] && continue
  timed[$real]=1
  s=$("$path" -c "$workload" 2>/dev/null) || continue
  if [ -z "$best" ] || awk -v a="$s" -v b="$best_s" 'BEGIN { exit !(a < b) }'; then
    best=$path best_s=$s
  fi
done
echo "${best:-python3}"
