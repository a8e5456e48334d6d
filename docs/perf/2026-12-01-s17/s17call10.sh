#!/bin/bash
# Session 17, call 10: gpu_reliability without large_mn_no_index_overflow (the test no call's
# limit has fit since session 2), so the three tests after it run too.
source scripts/dev/call_prelude.sh
timeout 200 $BIN/gpu_reliability --test-threads=1 --skip large_mn > $R/test-gpu_reliability-skip-large.txt 2>&1
echo "rc=$? $(grep '^test result' $R/test-gpu_reliability-skip-large.txt) at $(elapsed)"
grep "^test " $R/test-gpu_reliability-skip-large.txt
pack_out s17call10
