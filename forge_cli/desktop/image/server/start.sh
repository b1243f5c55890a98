#!/bin/sh
# forge-desktop's entrypoint (the image's CMD; runs as `user`): the desktop an OSWorld task runs in.
#
#   Xvfb $DISPLAY (SCREEN_WIDTHxSCREEN_HEIGHTx24, no TCP) -> a dbus session bus -> the at-spi bus (apps expose
#   their accessibility trees: GTK_MODULES=gail:atk-bridge, NO_AT_BRIDGE unset) -> openbox -> server.py on
#   127.0.0.1:5000 -> socat relays from unix sockets $RELAY/{5000,9222,8080}.sock to 127.0.0.1:{5000,9222,8080}
#   -> lifeline.py in the foreground, which creates $RELAY/ready (the server answered /platform) once it listens.
#
# The container runs with --network none: its ports are its own, and the host reaches them only through the
# unix sockets in $RELAY (a bind-mounted directory). lifeline.py exits when forge's connection to
# $RELAY/lifeline.sock closes (or nobody connects within $FORGE_DESKTOP_CONNECT_S seconds); this script then
# exits, which ends the container (forge runs it with --init --rm). Logs of the helpers: $FORGE_DESKTOP_LOGS.
set -u

HERE=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
RELAY=${FORGE_DESKTOP_RELAY:-/relay}
LOGS=${FORGE_DESKTOP_LOGS:-/tmp/forge-desktop}
PORT=${FORGE_DESKTOP_PORT:-5000}
PYTHON=${FORGE_DESKTOP_PYTHON:-python3}
export DISPLAY="${DISPLAY:-:0}" HOME="${HOME:-/home/user}"
W=${SCREEN_WIDTH:-1920}
H=${SCREEN_HEIGHT:-1080}
mkdir -p "$LOGS" "$RELAY"
PIDS=""

# On the way out, end what this script started (in a container the kernel does it anyway; elsewhere not).
cleanup() {
  [ -n "$PIDS" ] && kill $PIDS 2>/dev/null
  [ -n "${DBUS_SESSION_BUS_PID:-}" ] && kill "$DBUS_SESSION_BUS_PID" 2>/dev/null
  rm -f "$RELAY/ready"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

fail() {
  echo "forge-desktop: $*" >&2
  for f in "$LOGS"/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}

# wait_for SECONDS COMMAND...: run COMMAND every 0.1 s until it succeeds or SECONDS pass.
wait_for() {
  tries=$(($1 * 10)); shift
  while ! "$@" >/dev/null 2>&1; do
    tries=$((tries - 1))
    [ "$tries" -le 0 ] && return 1
    sleep 0.1
  done
}

# 1. the X server
Xvfb "$DISPLAY" -screen 0 "${W}x${H}x24" -nolisten tcp -noreset >"$LOGS/xvfb.log" 2>&1 &
XVFB_PID=$!
PIDS="$PIDS $!"
wait_for 30 xdpyinfo || fail "Xvfb did not come up on $DISPLAY"
kill -0 "$XVFB_PID" 2>/dev/null || fail "Xvfb exited"

# 2. a dbus session bus, exported to everything started below
eval "$(dbus-launch --sh-syntax --exit-with-x11)" || fail "dbus-launch failed"
export DBUS_SESSION_BUS_ADDRESS

# 3. accessibility: the at-spi bus, and toolkits told to expose their trees on it
unset NO_AT_BRIDGE
export GTK_MODULES=gail:atk-bridge ACCESSIBILITY_ENABLED=1 QT_ACCESSIBILITY=1 QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1
/usr/libexec/at-spi-bus-launcher --launch-immediately >"$LOGS/at-spi.log" 2>&1 &
PIDS="$PIDS $!"
wait_for 10 dbus-send --session --print-reply --dest=org.a11y.Bus /org/a11y/bus org.a11y.Bus.GetAddress \
  || echo "forge-desktop: warning: the at-spi bus did not answer" >&2
# Chromium and others only build their trees when the session says assistive technology is on.
dbus-send --session --type=method_call --dest=org.a11y.Bus /org/a11y/bus org.freedesktop.DBus.Properties.Set \
  string:org.a11y.Status string:IsEnabled variant:boolean:true >/dev/null 2>&1 || true

# 4. the window manager
openbox >"$LOGS/openbox.log" 2>&1 &
PIDS="$PIDS $!"

# 5. forge's server for OSWorld's in-VM contract, and the relays the host talks through
cd "$HOME" || fail "no home directory $HOME"
"$PYTHON" "$HERE/server.py" --port "$PORT" 2>"$LOGS/server.log" &
SERVER_PID=$!
PIDS="$PIDS $!"
for p in "$PORT" 9222 8080; do
  socat "UNIX-LISTEN:$RELAY/$p.sock,fork,unlink-early,mode=666" "TCP:127.0.0.1:$p" >>"$LOGS/socat.log" 2>&1 &
  PIDS="$PIDS $!"
done
# through the relay, so that "ready" means the host can reach the server
wait_for 30 curl -fsS --unix-socket "$RELAY/$PORT.sock" "http://desktop/platform" \
  || fail "the server did not answer /platform through $RELAY/$PORT.sock"
kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited"
echo "forge-desktop: up (DISPLAY=$DISPLAY ${W}x${H}, relays in $RELAY)" >&2

# 6. the lifeline, in the foreground: when it returns, the container ends. It creates $RELAY/ready once its
#    socket listens (the server answered /platform above), so forge can connect as soon as it sees that file.
"$PYTHON" "$HERE/lifeline.py" --ready "$RELAY/ready" "$RELAY/lifeline.sock"
exit $?
