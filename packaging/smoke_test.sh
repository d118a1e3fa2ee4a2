#!/usr/bin/env bash
# Smoke test of the built app under a virtual X server: it opens with the demo
# pair, takes a typed prompt, streams a reply, quits cleanly and has saved both
# messages. Not part of the test suite (it needs the bundle and X tools).
#
#   packaging/smoke_test.sh [APP] [OUTDIR]
#     APP     default dist/specchat/specchat (any `specchat` launcher works)
#     OUTDIR  where smoke.png and app.log go (default build/smoke)
#   Needs: Xvfb xdotool imagemagick (Debian: apt-get install -y xvfb xdotool
#   imagemagick libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxkbcommon-x11-0 libegl1)
#   Waits: LOAD_WAIT (seconds for the demo pair to load, default 60),
#   REPLY_WAIT (seconds of streaming before the screenshot, default 25).
set -euo pipefail
cd "$(dirname "$0")/.."

APP=${1:-dist/specchat/specchat}
OUTDIR=${2:-build/smoke}
LOAD_WAIT=${LOAD_WAIT:-60}
REPLY_WAIT=${REPLY_WAIT:-25}
PROMPT=${PROMPT:-"Name three colors of the rainbow."}
DISPLAY_NUM=${DISPLAY_NUM:-:87}

fail() { echo "smoke test FAILED: $*" >&2; exit 1; }
for tool in Xvfb xdotool import; do
    command -v "$tool" >/dev/null || fail "$tool not installed"
done
[ -x "$APP" ] || command -v "$APP" >/dev/null || fail "no app at $APP (run packaging/build.sh)"

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d)
export SPECCHAT_DATA_DIR="$WORK/data" SPECCHAT_CONFIG_DIR="$WORK/config" SPECCHAT_CACHE_DIR="$WORK/cache"
export HF_HUB_OFFLINE=1 QT_QPA_PLATFORM=xcb DISPLAY=$DISPLAY_NUM
unset WAYLAND_DISPLAY

Xvfb "$DISPLAY_NUM" -screen 0 1280x800x24 -nolisten tcp >"$OUTDIR/xvfb.log" 2>&1 &
XVFB_PID=$!
APP_PID=
cleanup() {
    [ -n "$APP_PID" ] && kill "$APP_PID" 2>/dev/null || true
    kill "$XVFB_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
for _ in $(seq 50); do xdotool getmouselocation >/dev/null 2>&1 && break; sleep 0.2; done

start=$(date +%s)
"$APP" --demo >"$OUTDIR/app.log" 2>&1 &
APP_PID=$!

WID=
for _ in $(seq 60); do
    kill -0 "$APP_PID" 2>/dev/null || fail "app exited early (see $OUTDIR/app.log)"
    WID=$(xdotool search --onlyvisible --name '^specchat' 2>/dev/null | head -1 || true)
    [ -n "$WID" ] && break
    sleep 1
done
[ -n "$WID" ] || fail "no specchat window within 60 s"
echo "window $WID after $(( $(date +%s) - start ))s"

# The demo pair loads (and on first run its F32 target is made) in the background;
# once loaded the composer has the keyboard focus.
for _ in $(seq "$LOAD_WAIT"); do
    kill -0 "$APP_PID" 2>/dev/null || fail "app died while loading (see $OUTDIR/app.log)"
    [ -f "$SPECCHAT_DATA_DIR/models/demo/SmolLM2-135M-Instruct.F32.gguf.json" ] && break
    sleep 1
done
sleep 5
xdotool windowfocus --sync "$WID" 2>/dev/null || xdotool windowfocus "$WID"
xdotool type --delay 20 "$PROMPT"
xdotool key Return
echo "prompt sent after $(( $(date +%s) - start ))s"
sleep "$REPLY_WAIT"
kill -0 "$APP_PID" 2>/dev/null || fail "app died while replying (see $OUTDIR/app.log)"
import -window "$WID" "$OUTDIR/smoke.png" 2>/dev/null || import -window root "$OUTDIR/smoke.png"
echo "screenshot: $OUTDIR/smoke.png"

xdotool windowfocus "$WID" 2>/dev/null || true
xdotool key ctrl+q
for _ in $(seq 30); do kill -0 "$APP_PID" 2>/dev/null || break; sleep 1; done
if kill -0 "$APP_PID" 2>/dev/null; then fail "app did not quit within 30 s of Ctrl+Q"; fi
set +e
wait "$APP_PID"
rc=$?
set -e
APP_PID=
[ "$rc" -eq 0 ] || fail "app exited with status $rc (see $OUTDIR/app.log)"
grep -q "Traceback" "$OUTDIR/app.log" && fail "a Python traceback in $OUTDIR/app.log"

python3 - "$SPECCHAT_DATA_DIR/conversations.sqlite3" "$PROMPT" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT role, content FROM messages ORDER BY conversation_id, position").fetchall()
print("saved messages:", [(r, c[:60]) for r, c in rows])
if ("user", sys.argv[2]) not in rows:
    sys.exit("smoke test FAILED: the typed prompt was not saved as a user message")
if not any(r == "assistant" and c.strip() for r, c in rows):
    sys.exit("smoke test FAILED: no assistant reply was saved")
PY
echo "smoke test passed in $(( $(date +%s) - start ))s"
