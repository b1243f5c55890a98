#!/bin/bash
# reward 1 when /app/hello.txt holds exactly "Hello, Harbor!" (one line), else 0
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, Harbor!" ] && [ "$(wc -l < /app/hello.txt)" -eq 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt is missing or wrong"
  echo 0 > /logs/verifier/reward.txt
fi
