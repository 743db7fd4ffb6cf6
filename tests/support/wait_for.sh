# Sourced by the multi-process test scripts.
# wait_for FILE PATTERN COUNT SECONDS: true once FILE has COUNT lines matching PATTERN, false when
# SECONDS pass first.
wait_for() {
  local i c
  for ((i = 0; i < $4 * 20; ++i)); do
    c=$(grep -c -- "$2" "$1" 2>/dev/null)  # the file may not exist yet
    [ "${c:-0}" -ge "$3" ] && return 0
    sleep 0.05
  done
  return 1
}
