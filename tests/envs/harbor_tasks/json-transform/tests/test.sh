#!/bin/bash
# writes reward.json: reward 1 when /app/adults.json equals the expected list; "parses" 1 when it is JSON at all
python3 - <<'PY'
import json, os

expected = json.load(open(os.environ["EXPECTED"]))
try:
    got = json.load(open("/app/adults.json"))
    parses = 1
except (OSError, ValueError) as exc:
    print(f"adults.json: {exc}")
    got, parses = None, 0
reward = 1 if got == expected else 0
print(f"expected {expected}, got {got}")
json.dump({"reward": reward, "parses": parses}, open("/logs/verifier/reward.json", "w"))
PY
