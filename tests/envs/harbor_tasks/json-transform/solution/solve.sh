#!/bin/bash
python3 -c '
import json
people = json.load(open("/app/people.json"))
json.dump(sorted(p["name"] for p in people if p["age"] >= 18), open("/app/adults.json", "w"))
'
