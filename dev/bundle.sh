#!/bin/bash
# Copies the kernels and this harness into /work/main/bundle/kdev (git-ignored) for the device.
set -e
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DST=/work/main/bundle/kdev
rm -rf $DST && mkdir -p $DST
cp -r $SRC/kernels $DST/
cp $SRC/scripts/dev/*.py $SRC/scripts/dev/*.sh $SRC/scripts/dev/*.cu $SRC/scripts/dev/*.cuh $DST/
cp /work/shared/peers/anchors.py $DST/
ls $DST
