#!/bin/bash
# reward 1 when every case passes (check.sh must stay executable: it is run directly)
ok=1
/tests/check.sh 9 2 3 4 || ok=0
/tests/check.sh 0 || ok=0
/tests/check.sh 5 5 || ok=0
/tests/check.sh -1 10 -11 || ok=0
echo "$ok" > /logs/verifier/reward.txt
