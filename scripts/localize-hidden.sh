#!/bin/sh
# Make every hidden symbol of a relocatable object local, except the
# DW.ref.* personality/typeinfo references that C++ exception tables share
# across objects in COMDAT groups (a static libfaiss.a linked after us must
# still find them). Usage: localize-hidden.sh OBJCOPY FILE.o
set -eu
objcopy=$1
obj=$2
list=$obj.localize
readelf -sW "$obj" | awk '($5 == "GLOBAL" || $5 == "WEAK") && $6 == "HIDDEN" && $7 != "UND" && $8 !~ /^DW\.ref\./ { print $8 }' >"$list"
"$objcopy" --localize-symbols="$list" "$obj"
rm -f "$list"
