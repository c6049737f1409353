#!/usr/bin/env bash
# Run aider against a local `fastmode serve`, once per edit format, and check that it applied
# the one-line edit asked for. By hand, not in the suite (aider is not a dependency):
#   python3 -m venv /tmp/aider-venv && .venv/bin/uv pip install --python /tmp/aider-venv/bin/python aider-chat==0.86.2
#   unshare --net --fork bash -c 'ip link set lo up; scripts/aider_check.sh /tmp/aider-venv/bin/aider'
# (the network namespace keeps every request on loopback). Exits non-zero if any format fails.
set -u
AIDER=${1:?usage: aider_check.sh PATH/TO/aider [PORT]}
PORT=${2:-8011}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
"$ROOT/.venv/bin/fastmode" serve --port "$PORT" --ledger "$WORK/ledger.sqlite3" >"$WORK/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/v1/models" && break; sleep 0.1; done
failed=0
for fmt in whole diff udiff; do
  mkdir -p "$WORK/$fmt"
  printf 'first line\nsecond line\nthird line\n' >"$WORK/$fmt/README.md"
  (cd "$WORK/$fmt" && AIDER_CHECK_UPDATE=false "$AIDER" --model openai/frontier \
    --openai-api-base "http://127.0.0.1:$PORT/v1" --openai-api-key x --yes-always --no-git \
    --no-show-model-warnings --no-analytics --edit-format "$fmt" \
    --message "change the first line of README.md to Hello fastmode" README.md \
    >"$WORK/$fmt.log" 2>&1 </dev/null)
  code=$?
  if [ "$code" = 0 ] && [ "$(head -1 "$WORK/$fmt/README.md")" = "Hello fastmode" ] \
      && [ "$(tail -n +2 "$WORK/$fmt/README.md")" = "$(printf 'second line\nthird line')" ]; then
    echo "$fmt: applied (exit $code)"
  else
    echo "$fmt: FAILED (exit $code); README.md is now:"; cat "$WORK/$fmt/README.md"
    failed=1
  fi
done
exit $failed
