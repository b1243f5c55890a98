#!/bin/bash
# check.sh EXPECTED ARGS...: sum.sh prints EXPECTED for ARGS
got="$(bash /app/sum.sh "${@:2}" 2>&1)"
[ "$got" = "$1" ] || { echo "sum.sh ${*:2}: expected $1, got $got"; exit 1; }
