#!/bin/bash
# prints the sum of its integer arguments
total=1
for n in "$@"; do
  total=$((total * n))
done
echo "$total"
