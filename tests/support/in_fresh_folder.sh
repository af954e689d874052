#!/bin/sh
# in_fresh_folder.sh COMMAND [ARG...]: runs COMMAND ARG... FOLDER with FOLDER a
# new empty folder of its own, removed afterwards; exits with COMMAND's status.
# For test programs that leave files named for their run (mpi_promises's
# meeting files), so that no run leaves any behind.
folder=$(mktemp -d) || exit 1
"$@" "$folder"
status=$?
rm -rf "$folder"
exit $status
