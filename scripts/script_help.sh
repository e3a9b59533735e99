#!/bin/bash
# Sourced first by every scripts/run_*.sh: `-h` or `--help` anywhere among the arguments prints
# the script's header comment (what it does, its arguments, what it writes, its environment),
# and for the launchers the common environment of launch_common.sh, then exits 0 before any
# argument is read as a path. print_usage is what a wrong argument prints: the script's purpose
# (the first sentence of that header, on one line), then its usage line.

show_help_if_asked() {  # show_help_if_asked <script> "$@"
  local script="$1" arg
  shift
  for arg in "$@"; do
    if [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
      header "$script"
      if grep -q "launch_common.sh" "$script"; then
        echo
        echo "Environment:"
        header "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh" | grep "^  "
      fi
      exit 0
    fi
  done
}

header() {  # header <script>: its leading comment block, without the '# ' and shellcheck lines
  sed -n '2,${/^#/!q;/shellcheck/d;s/^# \{0,1\}//;p}' "$1"
}

purpose() {  # purpose <script>: the first sentence of its header (up to ': ' or '. '), on one line
  header "$1" | awk 'NF == 0 { done = 1 } !done { sub(/^ +/, ""); printf "%s%s", (NR > 1 ? " " : ""), $0 }' \
    | sed -E 's/[:.]( .*)?$//'
  echo
}

print_usage() {  # print_usage <arguments>: on stderr, what "$0" does, then "Usage: bash $0 <arguments>"
  {
    purpose "$0"
    echo "Usage: bash $0 $1  (--help for more)"
  } >&2
}
