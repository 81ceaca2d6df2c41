#!/bin/sh
echo "the check library was not found at configure time: unit tests cannot run" >&2
exit 1
