#!/bin/bash
# bench_select ms/query, three binaries alternated (old, mid, new): n d k l only g
n=$1; d=$2; k=$3; l=$4; only=$5; g=$6; R=${R:-4}
for r in $(seq 1 $R); do for v in old mid new; do
  case $v in old) B=/tmp/oldwt/build/bench_select;; mid) B=/tmp/bs_3a2f;; new) B=/work/main/build/bench_select;; esac
  echo "$v $($B -n $n -d $d -k $k -q ${Q:-800} -t 2 -l $l -g $g --data clustered --only $only 2>&1 | grep -E " $only " | awk '{print $3, $5}')"
done; done | /usr/bin/python3 -c "
import sys,statistics as st
d={}; rc={}
for line in sys.stdin:
    v,ms,rec=line.split(); d.setdefault(v,[]).append(float(ms)); rc[v]=rec
for v in ('old','mid','new'): print('$n d$d k$k $only g$g', v, 'median', round(st.median(d[v]),3), 'range', min(d[v]), max(d[v]), 'recall', rc[v])"
