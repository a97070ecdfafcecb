# Sourced by the llama.cpp buffer scripts (needs BIN, PORT and OUT set).
# start_once NAME MODEL [llama-server flags...]: start llama-server at -lv 4 until it listens (or logs an error),
# keep its start-up log in $OUT/NAME.log, stop it.
start_once() {
  local name=$1 model=$2
  shift 2
  "$BIN" -m "$model" --port "$PORT" -lv 4 "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 120); do grep -q "listening on\|error" "$OUT/$name.log" && break; sleep 0.5; done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
