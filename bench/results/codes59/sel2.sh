#!/bin/bash
# bench_select ms/query, two binaries alternated: A B n d k l only
A=$1; Bb=$2; n=$3; d=$4; k=$5; l=$6; only=$7; R=${R:-6}
for r in $(seq 1 $R); do for v in A B; do
  B=$A; [ $v = B ] && B=$Bb
  echo "$v $($B -n $n -d $d -k $k -q ${Q:-1000} -t 2 -l $l --data clustered --only $only 2>&1 | grep -E " $only " | awk '{print $3}')"
done; done | /usr/bin/python3 -c "
import sys,statistics as st
d={}
for line in sys.stdin:
    v,ms=line.split(); d.setdefault(v,[]).append(float(ms))
for v in ('A','B'): print('$n d$d k$k $only', v, 'median', round(st.median(d[v]),3), 'range', min(d[v]), max(d[v]))"
